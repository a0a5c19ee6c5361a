//! The three patch types `kubectl patch` / `kube::api::Patch` send.
//!
//! Strategic merge patch limits: the emulator has no OpenAPI schema, so instead
//! of per-field `patchMergeKey`s it merges a list by `name` when every element
//! on both sides is an object with a `name` (containers, env, volumes, ports …),
//! and `conditions` / `addresses` by `type`,
//! and replaces any other list, as JSON merge patch does. Directives supported:
//! `$patch: replace` / `$patch: delete` on maps, `$patch: delete` on named list
//! elements; other `$`-directives (`$setElementOrder`, `$retainKeys`,
//! `$deleteFromPrimitiveList`) are dropped.

use serde_json::{Map, Value};

use crate::status::ApiError;

/// Patch content types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    Json,
    Merge,
    Strategic,
}

impl PatchKind {
    /// Maps a `Content-Type` (parameters ignored) to a patch kind.
    pub fn from_content_type(ct: &str) -> Result<Self, ApiError> {
        match ct.split(';').next().unwrap_or("").trim() {
            "application/json-patch+json" => Ok(Self::Json),
            "application/merge-patch+json" => Ok(Self::Merge),
            "application/strategic-merge-patch+json" => Ok(Self::Strategic),
            other => Err(ApiError::UnsupportedMediaType {
                message: format!(
                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json (got {other:?}; server-side apply is not emulated)"
                ),
            }),
        }
    }
}

/// Applies `patch` (raw body) to `current`, returning the patched object.
pub fn apply(kind: PatchKind, current: &Value, patch: &[u8]) -> Result<Value, ApiError> {
    let patch: Value = serde_json::from_slice(patch)
        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
    let mut doc = current.clone();
    match kind {
        PatchKind::Json => {
            let ops: json_patch::Patch = serde_json::from_value(patch)
                .map_err(|e| ApiError::bad_request(format!("error decoding json patch: {e}")))?;
            // A failing `test` op or a bad path is a request the server cannot apply: 422.
            json_patch::patch(&mut doc, &ops).map_err(|e| {
                ApiError::invalid(format!(
                    "the server rejected our request due to an error in our request: {e}"
                ))
            })?;
        }
        PatchKind::Merge => {
            if !patch.is_object() {
                return Err(ApiError::bad_request("merge patch must be a JSON object"));
            }
            json_patch::merge(&mut doc, &patch);
        }
        PatchKind::Strategic => {
            let Value::Object(p) = patch else {
                return Err(ApiError::bad_request(
                    "strategic merge patch must be a JSON object",
                ));
            };
            strategic_map(&mut doc, p);
        }
    }
    Ok(doc)
}

fn strategic_map(target: &mut Value, mut patch: Map<String, Value>) {
    match patch.remove("$patch").as_ref().and_then(Value::as_str) {
        Some("replace") => {
            strip_directives(&mut patch);
            *target = Value::Object(patch);
            return;
        }
        Some("delete") => {
            *target = Value::Null;
            return;
        }
        _ => {}
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else { return };
    for (k, v) in patch {
        if k.starts_with('$') {
            continue;
        }
        match v {
            Value::Null => {
                t.remove(&k);
            }
            Value::Object(pm) => {
                let slot = t.entry(k.clone()).or_insert(Value::Null);
                strategic_map(slot, pm);
                if slot.is_null() {
                    t.remove(&k);
                }
            }
            Value::Array(pl) => {
                let key = merge_key(&k);
                let merged = match t.remove(&k) {
                    Some(Value::Array(cur)) if named(&cur, key) && named(&pl, key) => {
                        merge_named(cur, pl, key)
                    }
                    _ => pl.into_iter().filter(|e| !is_delete(e)).collect(),
                };
                t.insert(k, Value::Array(merged));
            }
            other => {
                t.insert(k, other);
            }
        }
    }
}

/// The `patchMergeKey` of a list field: `type` for pod/node `conditions` and node
/// `addresses`, `name` for the named lists (containers, env, volumes ...).
fn merge_key(field: &str) -> &'static str {
    match field {
        "conditions" | "addresses" => "type",
        _ => "name",
    }
}

fn named(list: &[Value], key: &str) -> bool {
    list.iter()
        .all(|e| e.get(key).is_some_and(Value::is_string))
}

fn is_delete(e: &Value) -> bool {
    e.get("$patch").and_then(Value::as_str) == Some("delete")
}

fn merge_named(mut cur: Vec<Value>, patch: Vec<Value>, key: &str) -> Vec<Value> {
    for p in patch {
        let name = p.get(key).cloned();
        let pos = cur.iter().position(|c| c.get(key) == name.as_ref());
        match (pos, is_delete(&p)) {
            (Some(i), true) => {
                cur.remove(i);
            }
            (None, true) => {}
            (Some(i), false) => {
                if let Value::Object(pm) = p {
                    strategic_map(&mut cur[i], pm);
                }
            }
            (None, false) => {
                let mut p = p;
                if let Value::Object(m) = &mut p {
                    strip_directives(m);
                }
                cur.push(p);
            }
        }
    }
    cur
}

fn strip_directives(m: &mut Map<String, Value>) {
    m.retain(|k, _| !k.starts_with('$'));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_null_deletes() {
        let cur = json!({"metadata": {"labels": {"a": "1", "b": "2"}}});
        let out = apply(
            PatchKind::Merge,
            &cur,
            br#"{"metadata":{"labels":{"a":null,"c":"3"}}}"#,
        )
        .unwrap();
        assert_eq!(out, json!({"metadata": {"labels": {"b": "2", "c": "3"}}}));
    }

    #[test]
    fn strategic_merges_named_lists() {
        let cur = json!({"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}});
        let p = br#"{"spec":{"containers":[{"name":"a","image":"z"},{"name":"b","$patch":"delete"},{"name":"c","image":"w"}]}}"#;
        let out = apply(PatchKind::Strategic, &cur, p).unwrap();
        assert_eq!(
            out,
            json!({"spec": {"containers": [{"name": "a", "image": "z"}, {"name": "c", "image": "w"}]}})
        );
    }

    #[test]
    fn strategic_merges_conditions_by_type() {
        let cur = json!({"status": {"conditions": [
            {"type": "Ready", "status": "True"},
            {"type": "PodScheduled", "status": "True"}
        ]}});
        let p = br#"{"status":{"conditions":[{"type":"PodScheduled","status":"False","reason":"Unschedulable"}]}}"#;
        let out = apply(PatchKind::Strategic, &cur, p).unwrap();
        assert_eq!(
            out["status"]["conditions"],
            json!([
                {"type": "Ready", "status": "True"},
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
            ])
        );
    }

    #[test]
    fn strategic_replace_directive() {
        let cur = json!({"metadata": {"labels": {"a": "1"}}});
        let out = apply(
            PatchKind::Strategic,
            &cur,
            br#"{"metadata":{"labels":{"$patch":"replace","b":"2"}}}"#,
        )
        .unwrap();
        assert_eq!(out, json!({"metadata": {"labels": {"b": "2"}}}));
    }

    #[test]
    fn json_patch_test_failure_is_invalid() {
        let cur = json!({"a": 1});
        let err = apply(
            PatchKind::Json,
            &cur,
            br#"[{"op":"test","path":"/a","value":2}]"#,
        )
        .unwrap_err();
        assert_eq!(err.code(), 422);
        assert_eq!(apply(PatchKind::Json, &cur, b"{").unwrap_err().code(), 400);
    }
}
