//! URL routing and the verbs: maps API paths onto the store.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};

use crate::negotiate::{self, Encoding, Wanted};
use crate::patch::{self, PatchKind};
use crate::resources::{self, Resource};
use crate::selectors::{FieldSelector, LabelSelector, Selector};
use crate::status::{ApiError, PreconditionField};
use crate::store::{DeleteOptions, Preconditions, Store};
use crate::table::{self, IncludeObject, TableOptions};
use crate::watch::{WatchFormat, WatchRequest};

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
    Yaml(u16, Value),
    Watch(Box<WatchRequest>),
}

fn ok(v: Value) -> Result<Reply, ApiError> {
    Ok(Reply::Json(200, v))
}

fn parse_json(body: &Bytes) -> Result<Value, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!("the body of the request could not be decoded: {e}"))
    })
}

/// A create or update body in the encoding its `Content-Type` names.
pub(crate) fn parse_body(content_type: &str, body: &Bytes) -> Result<Value, ApiError> {
    match negotiate::body_encoding(content_type)? {
        Encoding::Json => parse_json(body),
        Encoding::Yaml => serde_yaml_ng::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!("the body of the request could not be decoded: {e}"))
        }),
    }
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

/// One request as the handlers see it.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub query: &'a HashMap<String, String>,
    pub content_type: &'a str,
    pub accept: &'a str,
    pub body: &'a Bytes,
}

/// Handles one request and renders the answer as the `Accept` header asks
/// (object, `Table`, `PartialObjectMetadata`; JSON or YAML).
pub fn handle(store: &Arc<Store>, settings: &Settings, call: Call<'_>) -> Result<Reply, ApiError> {
    let target = parse_path(call.path)?;
    // A dry run must not persist anything; rather than store the object anyway,
    // say it is not emulated (OpenAPI does not advertise `dryRun`, so kubectl
    // refuses --dry-run=server before asking).
    if call.method != "GET" && call.query.get("dryRun").is_some_and(|v| !v.is_empty()) {
        return Err(ApiError::bad_request(
            "dryRun is not supported by the emulator; the request was not applied",
        ));
    }
    let (res, is_list) = match &target {
        Target::Collection { res, .. } => (*res, call.method == "GET"),
        Target::Item { res, .. } | Target::Sub { res, .. } => (*res, false),
        Target::Bindings { .. } => (resources::PODS, false),
    };
    let wanted = negotiate::for_resource(call.accept, is_list)?;
    let table = match wanted {
        Wanted::Table(version) => Some(TableOptions {
            version,
            include: IncludeObject::parse(call.query.get("includeObject").map(String::as_str))?,
        }),
        _ => None,
    };
    let format = match (wanted, table) {
        (_, Some(t)) => WatchFormat::Table(t),
        (Wanted::Metadata(v), _) => WatchFormat::Metadata(v),
        _ => WatchFormat::Object,
    };
    let reply = dispatch(store, settings, call, target, format)?;
    Ok(match reply {
        Reply::Json(code, v) if v.get("kind").and_then(Value::as_str) != Some("Status") => {
            let rendered = render(&res, &v, wanted, table);
            match wanted {
                Wanted::Object(Encoding::Yaml) => Reply::Yaml(code, rendered),
                _ => Reply::Json(code, rendered),
            }
        }
        other => other,
    })
}

/// The object or list `v` in the representation the client asked for.
fn render(res: &Resource, v: &Value, wanted: Wanted, table: Option<TableOptions>) -> Value {
    let is_list = v.get("items").is_some_and(Value::is_array)
        && v.get("kind")
            .and_then(Value::as_str)
            .is_some_and(|k| k.ends_with("List"));
    match (wanted, table) {
        (_, Some(opts)) if is_list => {
            let items = v["items"].as_array().map_or(&[][..], Vec::as_slice);
            let meta = v.get("metadata").cloned().unwrap_or_else(|| json!({}));
            table::table(res, items, meta, opts, true)
        }
        (_, Some(opts)) => {
            let rv = v.pointer("/metadata/resourceVersion").cloned();
            let meta = rv.map_or_else(|| json!({}), |rv| json!({"resourceVersion": rv}));
            table::table(res, std::slice::from_ref(v), meta, opts, true)
        }
        (Wanted::Metadata(version), _) if is_list => table::partial_metadata_list(v, version),
        (Wanted::Metadata(version), _) => table::partial_metadata(v, version),
        _ => v.clone(),
    }
}

fn dispatch(
    store: &Arc<Store>,
    settings: &Settings,
    call: Call<'_>,
    target: Target,
    format: WatchFormat,
) -> Result<Reply, ApiError> {
    let Call {
        method,
        path,
        query,
        content_type,
        body,
        ..
    } = call;
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
                let flag = |k: &str| matches!(query.get(k).map(String::as_str), Some("1" | "true"));
                if flag("sendInitialEvents") && !flag("allowWatchBookmarks") {
                    return Err(ApiError::invalid(
                        "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled and allowWatchBookmarks is true",
                    ));
                }
                let timeout = match query.get("timeoutSeconds") {
                    Some(t) => Duration::from_secs(
                        t.parse()
                            .map_err(|_| ApiError::bad_request("invalid timeoutSeconds"))?,
                    ),
                    None => settings.default_watch_timeout,
                };
                return Ok(Reply::Watch(Box::new(WatchRequest {
                    resource: res,
                    namespace: ns,
                    selector,
                    resource_version: parse_rv(query)?,
                    bookmarks: matches!(
                        query.get("allowWatchBookmarks").map(String::as_str),
                        Some("1" | "true")
                    ),
                    send_initial_events: matches!(
                        query.get("sendInitialEvents").map(String::as_str),
                        Some("1" | "true")
                    ),
                    timeout,
                    bookmark_interval: settings.bookmark_interval,
                    format,
                })));
            }
            list(store, &res, ns.as_deref(), &selector, query)
        }
        ("POST", Target::Collection { res, ns }) => Ok(Reply::Json(
            201,
            store.create(&res, ns.as_deref(), parse_body(content_type, body)?)?,
        )),
        ("GET", Target::Item { res, ns, name }) => ok(store.get(&res, ns.as_deref(), &name)?),
        ("PUT", Target::Item { res, ns, name }) => {
            let new = parse_body(content_type, body)?;
            ok(store.update_with(&res, ns.as_deref(), &name, |cur| {
                uid_precondition(&res, ns.as_deref(), &name, &new, cur)?;
                Ok(new)
            })?)
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
        ("DELETE", Target::Collection { res, ns }) if res.verbs().contains(&"deletecollection") => {
            let selector = Selector {
                labels: LabelSelector::parse(
                    query.get("labelSelector").map_or("", String::as_str),
                )?,
                fields: FieldSelector::parse(
                    res.plural,
                    query.get("fieldSelector").map_or("", String::as_str),
                )?,
            };
            delete_collection(
                store,
                &res,
                ns.as_deref(),
                &selector,
                &delete_options(body, query)?,
            )
        }
        (_, Target::Sub { res, sub, .. }) if !res.has_subresource(&sub) => {
            Err(ApiError::NotFound {
                message: "the server could not find the requested resource".into(),
            })
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
                    None => parse_body(content_type, body)?,
                };
                match kind {
                    Some(_) => {
                        if let Some(u) = other_uid(&new, cur) {
                            return Err(ApiError::uid_immutable(&res, &name, u));
                        }
                    }
                    None => uid_precondition(&res, ns.as_deref(), &name, &new, cur)?,
                }
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
    // Pagination: the continue token is "<resourceVersion>/<namespace>/<name>": the
    // first page's resourceVersion, then the last object returned. Unlike the real
    // server, later pages are not from the first page's snapshot, but every page reports
    // the first page's resourceVersion, as the real server's do: a client that watches
    // from it (kube-runtime's watcher takes the last page's) is sent every change made
    // while it paged. Reported at the live resourceVersion, a later page hid the
    // deletion of an object an earlier page had listed, and the client kept it for good
    // (`docs/architecture.md#chaos-run`).
    let token = query.get("continue").filter(|t| !t.is_empty());
    let (snapshot, after) = match token {
        None => (None, None),
        Some(t) => {
            let bad = || ApiError::bad_request(format!("invalid continue token {t:?}"));
            let (rv, last) = t.split_once('/').ok_or_else(bad)?;
            let rv = rv.parse::<u64>().map_err(|_| bad())?;
            if rv < store.compacted() {
                return Err(ApiError::Expired {
                    message: format!(
                        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter. (resourceVersion {rv})"
                    ),
                });
            }
            (Some(rv), Some(last.split_once('/').unwrap_or(("", last))))
        }
    };
    let limit = query
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0);
    // The real server leaves remainingItemCount out when a selector filters the list.
    let count_rest = sel.is_empty();
    let page = store.list_page(res, ns, sel, after, limit, count_rest);
    let items = page.items;
    let rv = snapshot.unwrap_or(page.resource_version);
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if page.rest > 0
        && let Some(last) = items.last()
    {
        let m = |f: &str| {
            last.pointer(&format!("/metadata/{f}"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        meta["continue"] = format!("{rv}/{}/{}", m("namespace"), m("name")).into();
        if count_rest {
            meta["remainingItemCount"] = page.rest.into();
        }
    }
    ok(json!({
        "kind": format!("{}List", res.kind),
        "apiVersion": res.api_version(),
        "metadata": meta,
        "items": items,
    }))
}

/// `deletecollection`: deletes every matching object (graceful rules apply to
/// each) and answers with the list of what was deleted, as the real server does.
fn delete_collection(
    store: &Store,
    res: &Resource,
    ns: Option<&str>,
    sel: &Selector,
    opts: &DeleteOptions,
) -> Result<Reply, ApiError> {
    let (items, _) = store.list(res, ns, sel);
    let mut deleted = Vec::new();
    for item in items {
        let name = item
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let item_ns = item.pointer("/metadata/namespace").and_then(Value::as_str);
        match store.delete_with(res, item_ns, name, opts) {
            Ok(v) => deleted.push(v),
            // Deleted by someone else meanwhile: nothing left to do for it.
            Err(ApiError::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    ok(json!({
        "kind": format!("{}List", res.kind),
        "apiVersion": res.api_version(),
        "metadata": {"resourceVersion": store.resource_version().to_string()},
        "items": deleted,
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

/// The `metadata.uid` of `new` when it names another object than `cur`.
fn other_uid<'a>(new: &'a Value, cur: &Value) -> Option<&'a str> {
    let u = new.pointer("/metadata/uid").and_then(Value::as_str)?;
    (!u.is_empty() && Some(u) != cur.pointer("/metadata/uid").and_then(Value::as_str)).then_some(u)
}

/// An update's body UID is a storage precondition (`rest.DefaultUpdatedObjectInfo`):
/// it must name the stored object.
fn uid_precondition(
    res: &Resource,
    ns: Option<&str>,
    name: &str,
    new: &Value,
    cur: &Value,
) -> Result<(), ApiError> {
    match other_uid(new, cur) {
        Some(u) => Err(ApiError::storage_precondition_failed(
            res,
            ns,
            name,
            PreconditionField::Uid,
            u,
            cur.pointer("/metadata/uid")
                .and_then(Value::as_str)
                .unwrap_or(""),
        )),
        None => Ok(()),
    }
}

/// Marks the pod `PodScheduled=True`, as the registry's `assignPod` does on bind.
fn set_pod_scheduled(pod: &mut Value) {
    if !pod.get("status").is_some_and(Value::is_object) {
        pod["status"] = json!({});
    }
    if !pod["status"].get("conditions").is_some_and(Value::is_array) {
        pod["status"]["conditions"] = json!([]);
    }
    let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
    if let Some(conds) = pod["status"]["conditions"].as_array_mut() {
        match conds
            .iter_mut()
            .find(|c| c.get("type").and_then(Value::as_str) == Some("PodScheduled"))
        {
            Some(c) if c.get("status").and_then(Value::as_str) == Some("True") => {}
            Some(c) => *c = json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now}),
            None => conds.push(json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now})),
        }
    }
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
    let rv = s("/metadata/resourceVersion");
    store.update_with(&resources::PODS, ns, &name, |cur| {
        // Preconditions first, as the storage layer checks them before the update.
        let stored = |f: &str| cur.pointer(f).and_then(Value::as_str).unwrap_or("");
        for (wanted, field, at) in [
            (&uid, PreconditionField::Uid, "/metadata/uid"),
            (&rv, PreconditionField::ResourceVersion, "/metadata/resourceVersion"),
        ] {
            if !wanted.is_empty() && wanted != stored(at) {
                return Err(ApiError::storage_precondition_failed(
                    &resources::PODS, ns, &name, field, wanted, stored(at),
                ));
            }
        }
        let bound = cur.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or("");
        if !bound.is_empty() {
            return Err(ApiError::Conflict {
                message: format!("Operation cannot be fulfilled on pods/binding \"{name}\": pod {name} is already assigned to node \"{bound}\""),
            });
        }
        let mut out = cur.clone();
        if !out.get("spec").is_some_and(Value::is_object) {
            out["spec"] = json!({});
        }
        out["spec"]["nodeName"] = node.clone().into();
        set_pod_scheduled(&mut out);
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
