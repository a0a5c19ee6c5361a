//! OpenAPI v3 discovery (`/openapi/v3` and one document per group-version), as far
//! as clients use it against this emulator: the paths and operations served, each
//! tagged with `x-kubernetes-group-version-kind` and `x-kubernetes-action`, and the
//! query parameters they take.
//!
//! kubectl reads these documents to learn that create, update and patch accept
//! `fieldValidation` (so it leaves validation to the server instead of downloading
//! the full schema). No `components.schemas` are published: kubectl then computes
//! strategic merge patches from its compiled-in types, which for the core types
//! served here are the same schema. The limit: the emulator accepts
//! `fieldValidation=Strict` but, having no schema, does not reject unknown fields.

use serde_json::{Map, Value, json};

use crate::resources::{self, Resource};

/// `GET /openapi/v3`: the group-versions and where their documents are.
pub fn index() -> Value {
    let mut paths = Map::new();
    for (group, version) in group_versions() {
        let key = gv_key(group, version);
        let hash = hash(&document(group, version).to_string());
        paths.insert(
            key.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash={hash:016X}")}),
        );
    }
    json!({"paths": paths})
}

/// The document of `/openapi/v3/<key>` (`api/v1`, `apis/<group>/<version>`), or
/// None for a group-version that is not served.
pub fn for_path(key: &str) -> Option<Value> {
    group_versions()
        .into_iter()
        .find(|(g, v)| gv_key(g, v) == key)
        .map(|(g, v)| document(g, v))
}

fn group_versions() -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&'static str, &'static str)> = Vec::new();
    for r in resources::ALL.iter() {
        if !out.contains(&(r.group, r.version)) {
            out.push((r.group, r.version));
        }
    }
    out
}

fn gv_key(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// FNV-1a: a stable content hash for the `hash=` cache-busting parameter.
fn hash(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn query_param(name: &str, description: &str) -> Value {
    json!({
        "name": name,
        "in": "query",
        "description": description,
        "schema": {"type": "string", "uniqueItems": true},
    })
}

fn path_param(name: &str) -> Value {
    json!({
        "name": name,
        "in": "path",
        "required": true,
        "description": format!("{name} of the object"),
        "schema": {"type": "string", "uniqueItems": true},
    })
}

fn write_params() -> Vec<Value> {
    vec![
        query_param(
            "fieldManager",
            "fieldManager is a name associated with the actor or entity that is making these changes.",
        ),
        query_param(
            "fieldValidation",
            "fieldValidation instructs the server on how to handle objects in the request containing unknown or duplicate fields. Valid values are: Ignore, Warn, Strict.",
        ),
    ]
}

fn list_params() -> Vec<Value> {
    [
        (
            "allowWatchBookmarks",
            "requests watch events with type BOOKMARK",
        ),
        ("continue", "the continue token of a paginated list"),
        ("fieldSelector", "a selector on the objects' fields"),
        ("labelSelector", "a selector on the objects' labels"),
        ("limit", "the maximum number of objects to return"),
        ("resourceVersion", "where a list or watch starts"),
        ("sendInitialEvents", "a watch starts with the current state"),
        ("timeoutSeconds", "how long a list or watch may take"),
        ("watch", "stream changes instead of listing"),
    ]
    .iter()
    .map(|(n, d)| query_param(n, d))
    .collect()
}

fn operation(r: &Resource, action: &str, sub: Option<&str>, params: Vec<Value>) -> Value {
    let kind = sub
        .and_then(|s| r.subresources.iter().find(|x| x.name == s))
        .and_then(|s| s.kind)
        .unwrap_or(r.kind);
    let gvk = json!({"group": r.group, "version": r.version, "kind": kind});
    let mut op = json!({
        "operationId": format!("{action}{}{}", r.kind, sub.unwrap_or("")),
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk,
        "responses": {"200": {"description": "OK"}, "401": {"description": "Unauthorized"}},
    });
    if !params.is_empty() {
        op["parameters"] = Value::Array(params);
    }
    op
}

fn patch_body() -> Value {
    json!({
        "content": {
            "application/json-patch+json": {"schema": {"type": "object"}},
            "application/merge-patch+json": {"schema": {"type": "object"}},
            "application/strategic-merge-patch+json": {"schema": {"type": "object"}},
        },
        "required": true,
    })
}

fn document(group: &str, version: &str) -> Value {
    let mut paths = Map::new();
    let prefix = format!("/{}", gv_key(group, version));
    for r in resources::in_group_version(group, version) {
        let ns = if r.namespaced {
            "/namespaces/{namespace}"
        } else {
            ""
        };
        let scope_params = || {
            if r.namespaced {
                vec![path_param("namespace")]
            } else {
                Vec::new()
            }
        };
        let collection = format!("{prefix}{ns}/{}", r.plural);
        let mut coll = json!({
            "get": operation(r, "list", None, list_params()),
            "post": operation(r, "post", None, write_params()),
            "parameters": scope_params(),
        });
        if r.verbs().contains(&"deletecollection") {
            coll["delete"] = operation(r, "deletecollection", None, list_params());
        }
        paths.insert(collection.clone(), coll);
        let mut item_params = scope_params();
        item_params.push(path_param("name"));
        let mut patch = operation(r, "patch", None, write_params());
        patch["requestBody"] = patch_body();
        paths.insert(
            format!("{collection}/{{name}}"),
            json!({
                "get": operation(r, "get", None, Vec::new()),
                "put": operation(r, "put", None, write_params()),
                "patch": patch,
                "delete": operation(r, "delete", None, vec![query_param("gracePeriodSeconds", "the grace period in seconds")]),
                "parameters": item_params.clone(),
            }),
        );
        for s in r.subresources {
            let mut entry = Map::new();
            for verb in s.verbs {
                let (method, action) = match *verb {
                    "get" => ("get", "get"),
                    "update" => ("put", "put"),
                    "patch" => ("patch", "patch"),
                    "create" => ("post", "post"),
                    _ => continue,
                };
                let params = if method == "get" {
                    Vec::new()
                } else {
                    write_params()
                };
                let mut op = operation(r, action, Some(s.name), params);
                if method == "patch" {
                    op["requestBody"] = patch_body();
                }
                entry.insert(method.to_string(), op);
            }
            entry.insert("parameters".into(), Value::Array(item_params.clone()));
            paths.insert(
                format!("{collection}/{{name}}/{}", s.name),
                Value::Object(entry),
            );
        }
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": crate::discovery::GIT_VERSION},
        "paths": paths,
        "components": {},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_points_at_every_group_version() {
        let idx = index();
        let paths = idx["paths"].as_object().unwrap();
        assert!(paths.contains_key("api/v1"));
        assert!(paths.contains_key("apis/coordination.k8s.io/v1"));
        let url = paths["api/v1"]["serverRelativeURL"].as_str().unwrap();
        assert!(url.starts_with("/openapi/v3/api/v1?hash="), "{url}");
        assert!(for_path("apis/apps/v1").is_none());
    }

    #[test]
    fn every_patch_of_a_kind_declares_field_validation() {
        let doc = for_path("api/v1").unwrap();
        let mut pod_patches = 0;
        for (path, item) in doc["paths"].as_object().unwrap() {
            let Some(patch) = item.get("patch") else {
                continue;
            };
            let params = patch["parameters"].as_array().unwrap();
            assert!(
                params.iter().any(|p| p["name"] == "fieldValidation"),
                "{path}"
            );
            if patch["x-kubernetes-group-version-kind"]["kind"] == "Pod" {
                pod_patches += 1;
            }
        }
        assert_eq!(pod_patches, 2, "pods and pods/status");
        assert!(
            doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}/binding"]["post"].is_object()
        );
        assert!(doc["paths"]["/api/v1/nodes/{name}"]["patch"].is_object());
    }
}
