//! URL routing and the verbs: maps API paths onto the store.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};

use crate::patch::{self, PatchKind};
use crate::resources::{self, Resource};
use crate::selectors::{FieldSelector, LabelSelector, Selector};
use crate::status::ApiError;
use crate::store::{DeleteOptions, Preconditions, Store};
use crate::watch::WatchRequest;

/// What a request addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Collection {
        res: Resource,
        ns: Option<String>,
    },
    Item {
        res: Resource,
        ns: Option<String>,
        name: String,
    },
    Sub {
        res: Resource,
        ns: Option<String>,
        name: String,
        sub: String,
    },
    /// Legacy `POST /api/v1/namespaces/{ns}/bindings`.
    Bindings {
        ns: String,
    },
}

/// Parses `/api/v1/...` and `/apis/{group}/{version}/...`.
pub fn parse_path(path: &str) -> Result<Target, ApiError> {
    let nf = || ApiError::NotFound {
        message: "the server could not find the requested resource".into(),
    };
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Err(nf()),
    };
    let res = |plural: &str| resources::lookup(group, version, plural).ok_or_else(nf);
    let namespaced =
        |plural: &str| res(plural).and_then(|r| if r.namespaced { Ok(r) } else { Err(nf()) });
    let cluster =
        |plural: &str| res(plural).and_then(|r| if r.namespaced { Err(nf()) } else { Ok(r) });
    let s = |x: &str| Some(x.to_string());
    Ok(match rest {
        [p] => Target::Collection {
            res: res(p)?,
            ns: None,
        },
        ["namespaces", ns, "bindings"] if group.is_empty() => {
            Target::Bindings { ns: ns.to_string() }
        }
        ["namespaces", ns, p] => Target::Collection {
            res: namespaced(p)?,
            ns: s(ns),
        },
        ["namespaces", ns, p, name] => Target::Item {
            res: namespaced(p)?,
            ns: s(ns),
            name: name.to_string(),
        },
        ["namespaces", ns, p, name, sub] => Target::Sub {
            res: namespaced(p)?,
            ns: s(ns),
            name: name.to_string(),
            sub: sub.to_string(),
        },
        [p, name] => Target::Item {
            res: cluster(p)?,
            ns: None,
            name: name.to_string(),
        },
        [p, name, sub] => Target::Sub {
            res: cluster(p)?,
            ns: None,
            name: name.to_string(),
            sub: sub.to_string(),
        },
        _ => return Err(nf()),
    })
}

/// The Kubernetes verb of a request, for fault injection and the request log.
pub fn verb(method: &str, path: &str, query: &HashMap<String, String>) -> &'static str {
    let watch = matches!(query.get("watch").map(String::as_str), Some("1" | "true"));
    match (method, parse_path(path)) {
        ("GET", Ok(Target::Collection { .. })) if watch => "watch",
        ("GET", Ok(Target::Collection { .. })) => "list",
        ("GET", _) => "get",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", Ok(Target::Collection { .. })) => "deletecollection",
        ("DELETE", _) => "delete",
        _ => "unknown",
    }
}

/// Server settings the handlers need.
#[derive(Debug, Clone)]
pub struct Settings {
    pub bookmark_interval: Duration,
    pub default_watch_timeout: Duration,
}

/// A handler's answer.
#[derive(Debug)]
pub enum Reply {
    Json(u16, Value),
    Watch(WatchRequest),
}

fn ok(v: Value) -> Result<Reply, ApiError> {
    Ok(Reply::Json(200, v))
}

fn parse_json(body: &Bytes) -> Result<Value, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!("the body of the request could not be decoded: {e}"))
    })
}

fn parse_rv(q: &HashMap<String, String>) -> Result<Option<u64>, ApiError> {
    match q.get("resourceVersion").map(String::as_str) {
        None | Some("") => Ok(None),
        Some(v) => v
            .parse()
            .map(Some)
            .map_err(|_| ApiError::bad_request(format!("resourceVersion: Invalid value: {v:?}"))),
    }
}

/// Handles one request. `content_type` only matters for PATCH.
pub fn handle(
    store: &Arc<Store>,
    settings: &Settings,
    method: &str,
    path: &str,
    query: &HashMap<String, String>,
    content_type: &str,
    body: &Bytes,
) -> Result<Reply, ApiError> {
    let target = parse_path(path)?;
    let not_allowed = || {
        Err(ApiError::MethodNotAllowed {
            message: format!(
                "the server does not allow this method on the requested resource ({method} {path})"
            ),
        })
    };
    match (method, target) {
        ("GET", Target::Collection { res, ns }) => {
            let labels =
                LabelSelector::parse(query.get("labelSelector").map_or("", String::as_str))?;
            let fields = FieldSelector::parse(
                res.plural,
                query.get("fieldSelector").map_or("", String::as_str),
            )?;
            let selector = Selector { labels, fields };
            if matches!(query.get("watch").map(String::as_str), Some("1" | "true")) {
                let timeout = match query.get("timeoutSeconds") {
                    Some(t) => Duration::from_secs(
                        t.parse()
                            .map_err(|_| ApiError::bad_request("invalid timeoutSeconds"))?,
                    ),
                    None => settings.default_watch_timeout,
                };
                return Ok(Reply::Watch(WatchRequest {
                    resource: res,
                    namespace: ns,
                    selector,
                    resource_version: parse_rv(query)?,
                    bookmarks: matches!(
                        query.get("allowWatchBookmarks").map(String::as_str),
                        Some("1" | "true")
                    ),
                    timeout,
                    bookmark_interval: settings.bookmark_interval,
                }));
            }
            list(store, &res, ns.as_deref(), &selector, query)
        }
        ("POST", Target::Collection { res, ns }) => Ok(Reply::Json(
            201,
            store.create(&res, ns.as_deref(), parse_json(body)?)?,
        )),
        ("GET", Target::Item { res, ns, name }) => ok(store.get(&res, ns.as_deref(), &name)?),
        ("PUT", Target::Item { res, ns, name }) => {
            let new = parse_json(body)?;
            ok(store.update_with(&res, ns.as_deref(), &name, |_| Ok(new))?)
        }
        ("PATCH", Target::Item { res, ns, name }) => {
            let kind = PatchKind::from_content_type(content_type)?;
            ok(store.update_with(&res, ns.as_deref(), &name, |cur| {
                patch::apply(kind, cur, body)
            })?)
        }
        ("DELETE", Target::Item { res, ns, name }) => {
            let opts = delete_options(body, query)?;
            ok(store.delete_with(&res, ns.as_deref(), &name, &opts)?)
        }
        ("GET", Target::Sub { res, ns, name, sub }) if sub == "status" => {
            ok(store.get(&res, ns.as_deref(), &name)?)
        }
        // The status subresource only changes `.status` (and checks the resourceVersion).
        (m @ ("PUT" | "PATCH"), Target::Sub { res, ns, name, sub }) if sub == "status" => {
            let kind = if m == "PATCH" {
                Some(PatchKind::from_content_type(content_type)?)
            } else {
                None
            };
            ok(store.update_with(&res, ns.as_deref(), &name, |cur| {
                let new = match kind {
                    Some(k) => patch::apply(k, cur, body)?,
                    None => parse_json(body)?,
                };
                let mut out = cur.clone();
                out["status"] = new.get("status").cloned().unwrap_or(Value::Null);
                if let Some(rv) = new.pointer("/metadata/resourceVersion") {
                    out["metadata"]["resourceVersion"] = rv.clone();
                }
                Ok(out)
            })?)
        }
        ("POST", Target::Sub { res, ns, name, sub })
            if res == resources::PODS && sub == "binding" =>
        {
            bind(store, ns.as_deref(), Some(&name), &parse_json(body)?)
        }
        ("POST", Target::Bindings { ns }) => bind(store, Some(&ns), None, &parse_json(body)?),
        _ => not_allowed(),
    }
}

fn list(
    store: &Store,
    res: &Resource,
    ns: Option<&str>,
    sel: &Selector,
    query: &HashMap<String, String>,
) -> Result<Reply, ApiError> {
    let (mut items, rv) = store.list(res, ns, sel);
    let mut meta = json!({"resourceVersion": rv.to_string()});
    // Pagination: the continue token is the last returned "namespace/name".
    // Unlike the real server, later pages are not from the first page's snapshot.
    let key = |o: &Value| {
        let m = |f: &str| {
            o.pointer(&format!("/metadata/{f}"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        format!("{}/{}", m("namespace"), m("name"))
    };
    if let Some(token) = query.get("continue").filter(|t| !t.is_empty()) {
        items.retain(|o| key(o) > *token);
    }
    if let Some(limit) = query
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0 && items.len() > *l)
    {
        let rest = items.len() - limit;
        items.truncate(limit);
        if let Some(last) = items.last() {
            meta["continue"] = key(last).into();
            meta["remainingItemCount"] = rest.into();
        }
    }
    ok(json!({
        "kind": format!("{}List", res.kind),
        "apiVersion": res.api_version(),
        "metadata": meta,
        "items": items,
    }))
}

/// `DeleteOptions` from the body, or `gracePeriodSeconds` from the query.
fn delete_options(
    body: &Bytes,
    query: &HashMap<String, String>,
) -> Result<DeleteOptions, ApiError> {
    let opts = if body.is_empty() {
        Value::Null
    } else {
        parse_json(body)?
    };
    let get = |f: &str| {
        opts.pointer(&format!("/preconditions/{f}"))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let grace = match (
        opts.get("gracePeriodSeconds"),
        query.get("gracePeriodSeconds"),
    ) {
        (Some(Value::Null) | None, None) => None,
        (Some(v), _) if !v.is_null() => Some(v.as_i64().ok_or_else(|| {
            ApiError::bad_request(format!("gracePeriodSeconds: invalid value {v}"))
        })?),
        (_, Some(q)) => Some(q.parse().map_err(|_| {
            ApiError::bad_request(format!("gracePeriodSeconds: invalid value {q:?}"))
        })?),
        _ => None,
    };
    Ok(DeleteOptions {
        preconditions: Preconditions {
            uid: get("uid"),
            resource_version: get("resourceVersion"),
        },
        grace_period_seconds: grace,
    })
}

/// `Binding`: sets `spec.nodeName` once; binding a bound pod is a 409, as the
/// real registry's `assignPod` does.
fn bind(
    store: &Store,
    ns: Option<&str>,
    url_name: Option<&str>,
    binding: &Value,
) -> Result<Reply, ApiError> {
    let s = |p: &str| {
        binding
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let name = url_name.map_or_else(|| s("/metadata/name"), str::to_string);
    if url_name.is_some_and(|n| !s("/metadata/name").is_empty() && s("/metadata/name") != n) {
        return Err(ApiError::bad_request(
            "the name of the binding does not match the pod name on the URL",
        ));
    }
    let node = s("/target/name");
    if name.is_empty() || node.is_empty() {
        return Err(ApiError::invalid(
            "Binding is invalid: metadata.name and target.name are required",
        ));
    }
    let uid = s("/metadata/uid");
    let annotations = binding
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .cloned();
    store.update_with(&resources::PODS, ns, &name, |cur| {
        let bound = cur.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or("");
        if !bound.is_empty() {
            return Err(ApiError::Conflict {
                message: format!("Operation cannot be fulfilled on pods/binding \"{name}\": pod {name} is already assigned to node \"{bound}\""),
            });
        }
        if !uid.is_empty() && cur.pointer("/metadata/uid").and_then(Value::as_str) != Some(uid.as_str()) {
            return Err(ApiError::conflict("pods", &name));
        }
        let mut out = cur.clone();
        if !out.get("spec").is_some_and(Value::is_object) {
            out["spec"] = json!({});
        }
        out["spec"]["nodeName"] = node.clone().into();
        if let Some(a) = &annotations {
            if !out["metadata"].get("annotations").is_some_and(Value::is_object) {
                out["metadata"]["annotations"] = json!({});
            }
            for (k, v) in a {
                out["metadata"]["annotations"][k] = v.clone();
            }
        }
        Ok(out)
    })?;
    Ok(Reply::Json(
        201,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
    ))
}
