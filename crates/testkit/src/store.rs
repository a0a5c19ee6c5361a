//! The object store: JSON objects keyed by (resource, namespace, name), one
//! monotonic resourceVersion counter, and a bounded event history for watches.

use std::collections::{BTreeMap, VecDeque};
use std::hash::{BuildHasher, RandomState};
use std::sync::{Mutex, MutexGuard};

use hami_core::sync::MutexExt;
use serde_json::{Map, Value, json};
use tokio::sync::watch;

use crate::resources::{self, Resource};
use crate::selectors::Selector;
use crate::status::ApiError;

mod deletion;
pub use deletion::{DeleteOptions, GraceExpiry};

/// Watch event type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

/// One recorded change.
#[derive(Debug, Clone)]
pub struct Event {
    pub rv: u64,
    pub kind: EventType,
    pub resource: &'static str,
    pub namespace: String,
    pub object: Value,
    /// The object before a modification, so that selector-filtered watches can
    /// turn "left the selector" into DELETED and "entered it" into ADDED.
    pub previous: Option<Value>,
}

type Key = (&'static str, String, String);

/// One page of a list (see [`Store::list_page`]).
#[derive(Debug)]
pub struct Page {
    pub items: Vec<Value>,
    /// Matching objects after the page (with `count_rest`; else 1 if any, 0 if none).
    pub rest: usize,
    pub resource_version: u64,
}

#[derive(Debug)]
struct Inner {
    objects: BTreeMap<Key, Value>,
    rv: u64,
    history: VecDeque<Event>,
    /// Highest resourceVersion whose event has been dropped from `history`.
    compacted: u64,
    history_limit: usize,
    seq: u64,
    /// Graceful deletions waiting for their grace period to run out.
    deadlines: BTreeMap<Key, std::time::Instant>,
    grace_expiry: GraceExpiry,
    /// Services get cluster IPs from 10.96.0.0/12 in order, as a fresh cluster.
    next_cluster_ip: u32,
}

/// Thread-safe store. The lock is never held across an `.await`.
#[derive(Debug)]
pub struct Store {
    inner: Mutex<Inner>,
    rv_tx: watch::Sender<u64>,
    /// Bumped to end every open watch (fault injection: a dropped connection).
    drop_tx: watch::Sender<u64>,
    hasher: RandomState,
    /// Wakes the grace-period reaper when a deadline is added.
    reaper: tokio::sync::Notify,
}

/// What an update must match.
#[derive(Debug, Clone, Default)]
pub struct Preconditions {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

fn meta(obj: &Value, field: &str) -> Option<String> {
    obj.get("metadata")?
        .get(field)?
        .as_str()
        .map(str::to_string)
}

fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    // Callers have checked `obj` is an object, so indexing cannot panic.
    let slot = &mut obj["metadata"];
    if !slot.is_object() {
        *slot = Value::Object(Map::new());
    }
    match slot {
        Value::Object(m) => m,
        _ => unreachable!("metadata was just set to an object"),
    }
}

/// Everything but metadata and status: a change here bumps `generation`.
fn spec_part(obj: &Value) -> Value {
    match obj {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !matches!(k.as_str(), "metadata" | "status"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn now() -> String {
    timestamp_in(0)
}

/// RFC 3339 time `secs` seconds from now, at the API server's precision.
fn timestamp_in(secs: i64) -> String {
    (chrono::Utc::now() + chrono::Duration::seconds(secs))
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

impl Default for Store {
    fn default() -> Self {
        Self::new(10_000)
    }
}

impl Store {
    /// A store keeping the last `history_limit` events for watches, with the
    /// namespaces a fresh cluster has.
    pub fn new(history_limit: usize) -> Self {
        let store = Self {
            inner: Mutex::new(Inner {
                objects: BTreeMap::new(),
                rv: 0,
                history: VecDeque::new(),
                compacted: 0,
                history_limit: history_limit.max(1),
                seq: 0,
                next_cluster_ip: 1,
                deadlines: BTreeMap::new(),
                grace_expiry: GraceExpiry::default(),
            }),
            rv_tx: watch::channel(0).0,
            drop_tx: watch::channel(0).0,
            hasher: RandomState::new(),
            reaper: tokio::sync::Notify::new(),
        };
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            // Cannot fail on an empty store.
            let _ = store.create(
                &resources::NAMESPACES,
                None,
                json!({"metadata": {"name": ns}}),
            );
        }
        store
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock_unpoisoned()
    }

    /// Current (latest) resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.lock().rv
    }

    /// The oldest resourceVersion a watch (or a list's continuation) may still start
    /// from: older ones were compacted away and get 410.
    pub fn compacted(&self) -> u64 {
        self.lock().compacted
    }

    /// Subscribe to resourceVersion changes (watch streams wait on this).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.rv_tx.subscribe()
    }

    /// Ends every open watch stream, as a dropped connection or an API
    /// server restart would; clients must re-watch (and re-list on 410).
    pub fn drop_watches(&self) {
        self.drop_tx.send_modify(|n| *n += 1);
    }

    /// Notified by [`Store::drop_watches`].
    pub fn subscribe_drops(&self) -> watch::Receiver<u64> {
        self.drop_tx.subscribe()
    }

    /// Drops the whole event history, so any watch from an older
    /// resourceVersion gets 410 — lets tests provoke an expired watch.
    pub fn compact(&self) {
        let mut g = self.lock();
        g.compacted = g.rv;
        g.history.clear();
    }

    fn uid(&self, g: &mut Inner) -> String {
        g.seq += 1;
        let a = self.hasher.hash_one(g.seq);
        let b = self.hasher.hash_one(a ^ 0x9e37_79b9_7f4a_7c15);
        let x = (u128::from(a) << 64 | u128::from(b)) & !(0xf << 76) | (0x4 << 76);
        let h = format!("{x:032x}");
        format!(
            "{}-{}-{}-{}-{}",
            &h[..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..]
        )
    }

    fn record(&self, g: &mut Inner, ev: Event) {
        g.history.push_back(ev);
        while g.history.len() > g.history_limit {
            if let Some(old) = g.history.pop_front() {
                g.compacted = old.rv;
            }
        }
        self.rv_tx.send_replace(g.rv);
    }

    fn ns_key(res: &Resource, ns: Option<&str>) -> String {
        if res.namespaced {
            ns.unwrap_or("").to_string()
        } else {
            String::new()
        }
    }

    pub fn get(&self, res: &Resource, ns: Option<&str>, name: &str) -> Result<Value, ApiError> {
        let g = self.lock();
        g.objects
            .get(&(res.id, Self::ns_key(res, ns), name.to_string()))
            .cloned()
            .ok_or_else(|| ApiError::not_found(res.plural, name))
    }

    /// One page of a list: the matching objects after `after` (namespace, name),
    /// at most `limit` of them, whether more match after the page (and how many,
    /// when `count_rest`), and the resourceVersion. Only the page is cloned, so
    /// paging through a large collection costs no more than listing it once.
    pub fn list_page(
        &self,
        res: &Resource,
        ns: Option<&str>,
        sel: &Selector,
        after: Option<(&str, &str)>,
        limit: Option<usize>,
        count_rest: bool,
    ) -> Page {
        use std::ops::Bound;
        let g = self.lock();
        let scope = ns.map(|n| Self::ns_key(res, Some(n)));
        let start = match after {
            Some((n, m)) => Bound::Excluded((res.id, n.to_string(), m.to_string())),
            None => Bound::Included((res.id, scope.clone().unwrap_or_default(), String::new())),
        };
        let mut matching = g
            .objects
            .range((start, Bound::Unbounded))
            .take_while(|((r, _, _), _)| *r == res.id)
            .filter(|((_, n, _), _)| scope.as_deref().is_none_or(|s| s == n))
            .filter(|(_, o)| sel.matches(o));
        let limit = limit.unwrap_or(usize::MAX);
        let items: Vec<Value> = matching
            .by_ref()
            .take(limit)
            .map(|(_, o)| o.clone())
            .collect();
        let rest = if count_rest {
            matching.count()
        } else {
            usize::from(matching.next().is_some())
        };
        Page {
            items,
            rest,
            resource_version: g.rv,
        }
    }

    /// Lists matching objects (all namespaces when `ns` is None) and the
    /// resourceVersion the list is consistent with.
    pub fn list(&self, res: &Resource, ns: Option<&str>, sel: &Selector) -> (Vec<Value>, u64) {
        let g = self.lock();
        let items = g
            .objects
            .iter()
            .filter(|((r, n, _), _)| *r == res.id && ns.is_none_or(|ns| ns == n))
            .filter(|(_, o)| sel.matches(o))
            .map(|(_, o)| o.clone())
            .collect();
        (items, g.rv)
    }

    pub fn create(
        &self,
        res: &Resource,
        ns: Option<&str>,
        mut obj: Value,
    ) -> Result<Value, ApiError> {
        if !obj.is_object() {
            return Err(ApiError::bad_request("the body must be a JSON object"));
        }
        check_type(res, &mut obj)?;
        let mut g = self.lock();
        let nskey = Self::ns_key(res, ns);
        if res.namespaced {
            match meta(&obj, "namespace") {
                Some(n) if !n.is_empty() && n != nskey => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                _ => {}
            }
            if !g
                .objects
                .contains_key(&(resources::NAMESPACES.id, String::new(), nskey.clone()))
            {
                return Err(ApiError::not_found("namespaces", &nskey));
            }
        }
        let mut name = meta(&obj, "name").unwrap_or_default();
        if name.is_empty() {
            let Some(prefix) = meta(&obj, "generateName").filter(|p| !p.is_empty()) else {
                return Err(ApiError::invalid(format!(
                    "{} \"\" is invalid: metadata.name: Required value: name or generateName is required",
                    res.kind
                )));
            };
            let suffix = self.uid(&mut g);
            name = format!("{prefix}{}", &suffix[..5]);
        }
        let key = (res.id, nskey.clone(), name.clone());
        if g.objects.contains_key(&key) {
            return Err(ApiError::already_exists(res.plural, &name));
        }
        g.rv += 1;
        let uid = self.uid(&mut g);
        let m = meta_mut(&mut obj);
        m.insert("name".into(), name.into());
        if res.namespaced {
            m.insert("namespace".into(), nskey.clone().into());
        } else {
            m.remove("namespace");
        }
        m.insert("uid".into(), uid.into());
        m.insert("creationTimestamp".into(), now().into());
        m.insert("generation".into(), 1.into());
        m.insert("resourceVersion".into(), g.rv.to_string().into());
        defaults(res, &mut obj);
        if res.id == resources::SERVICES.id {
            allocate_cluster_ip(&mut g, &mut obj);
        }
        g.objects.insert(key, obj.clone());
        let ev = Event {
            rv: g.rv,
            kind: EventType::Added,
            resource: res.id,
            namespace: nskey,
            object: obj.clone(),
            previous: None,
        };
        self.record(&mut g, ev);
        Ok(obj)
    }

    /// Replaces an object with `f(current)` under optimistic concurrency: a
    /// non-empty `metadata.resourceVersion` in the result that differs from the
    /// stored one is a 409 Conflict, a non-empty `metadata.uid` that differs a 422
    /// (the field is immutable). Identity fields are kept; a no-op change does not
    /// bump the resourceVersion (as the real server).
    pub fn update_with(
        &self,
        res: &Resource,
        ns: Option<&str>,
        name: &str,
        f: impl FnOnce(&Value) -> Result<Value, ApiError>,
    ) -> Result<Value, ApiError> {
        let mut g = self.lock();
        let key = (res.id, Self::ns_key(res, ns), name.to_string());
        let cur = g
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(res.plural, name))?;
        let mut new = f(&cur)?;
        if !new.is_object() {
            return Err(ApiError::bad_request("the body must be a JSON object"));
        }
        check_type(res, &mut new)?;
        if res.id == resources::SECRETS.id {
            fold_string_data(&mut new);
        }
        if let Some(n) = meta(&new, "name").filter(|n| n != name) {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        if res.namespaced && meta(&new, "namespace").is_some_and(|n| !n.is_empty() && n != key.1) {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        let cur_rv = meta(&cur, "resourceVersion").unwrap_or_default();
        if meta(&new, "resourceVersion").is_some_and(|rv| !rv.is_empty() && rv != cur_rv) {
            return Err(ApiError::conflict(res.plural, name));
        }
        // A UID in the new object that is not the stored one fails update validation
        // (immutable field): how a UID in a patch acts as a precondition. Updates (PUT)
        // check theirs as a storage precondition first, in `f`.
        if let Some(u) =
            meta(&new, "uid").filter(|u| !u.is_empty() && Some(u) != meta(&cur, "uid").as_ref())
        {
            return Err(ApiError::uid_immutable(res, name, &u));
        }
        let cm = cur.get("metadata").cloned().unwrap_or_default();
        let generation = cm.get("generation").and_then(Value::as_i64).unwrap_or(1);
        let bumped = if spec_part(&new) != spec_part(&cur) {
            generation + 1
        } else {
            generation
        };
        let m = meta_mut(&mut new);
        for f in [
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ] {
            match cm.get(f) {
                Some(v) => m.insert(f.into(), v.clone()),
                None => m.remove(f),
            };
        }
        m.insert("generation".into(), bumped.into());
        m.insert("resourceVersion".into(), cur_rv.into());
        if new == cur {
            return Ok(cur);
        }
        if deletion::finished(&new) {
            g.objects.insert(key.clone(), new);
            return Ok(self.remove_locked(&mut g, &key));
        }
        g.rv += 1;
        meta_mut(&mut new).insert("resourceVersion".into(), g.rv.to_string().into());
        g.objects.insert(key.clone(), new.clone());
        let ev = Event {
            rv: g.rv,
            kind: EventType::Modified,
            resource: res.id,
            namespace: key.1,
            object: new.clone(),
            previous: Some(cur),
        };
        self.record(&mut g, ev);
        Ok(new)
    }

    /// Events after `cursor` for `res` (and `ns` if given), plus the new cursor.
    /// `Err(Expired)` when `cursor` predates the retained history.
    pub fn events_since(
        &self,
        res: &Resource,
        ns: Option<&str>,
        cursor: u64,
    ) -> Result<(Vec<Event>, u64), ApiError> {
        let g = self.lock();
        if cursor < g.compacted {
            return Err(ApiError::Expired {
                message: format!("too old resource version: {cursor} ({})", g.compacted + 1),
            });
        }
        // The history is in resourceVersion order (one counter, appended under the
        // lock): start at the first event after `cursor` instead of scanning it all for
        // every watch at every write.
        let first = g.history.partition_point(|e| e.rv <= cursor);
        let evs = g
            .history
            .range(first..)
            .filter(|e| e.resource == res.id && ns.is_none_or(|n| n == e.namespace))
            .cloned()
            .collect();
        Ok((evs, g.rv.max(cursor)))
    }
}

/// `kind`/`apiVersion` must match the URL when given; set them when absent.
fn check_type(res: &Resource, obj: &mut Value) -> Result<(), ApiError> {
    let av = res.api_version();
    for (field, want) in [("kind", res.kind), ("apiVersion", av.as_str())] {
        match obj.get(field).and_then(Value::as_str) {
            None | Some("") => obj[field] = want.into(),
            Some(got) if got == want => {}
            Some(got) => {
                return Err(ApiError::bad_request(format!(
                    "the API version or kind in the request body ({got}) does not match the URL ({want})"
                )));
            }
        }
    }
    Ok(())
}

/// A `ClusterIP` service without an address gets the next free one
/// (`None` headless services keep theirs).
fn allocate_cluster_ip(g: &mut Inner, obj: &mut Value) {
    let ty = obj.pointer("/spec/type").and_then(Value::as_str);
    let has_ip = obj
        .pointer("/spec/clusterIP")
        .and_then(Value::as_str)
        .is_some_and(|ip| !ip.is_empty());
    if ty != Some("ClusterIP") && ty != Some("NodePort") && ty != Some("LoadBalancer") || has_ip {
        return;
    }
    let n = g.next_cluster_ip;
    g.next_cluster_ip += 1;
    let ip = std::net::Ipv4Addr::from(u32::from(std::net::Ipv4Addr::new(10, 96, 0, 0)) + n);
    obj["spec"]["clusterIP"] = ip.to_string().into();
    obj["spec"]["clusterIPs"] = json!([ip.to_string()]);
}

/// Standard base64 (RFC 4648 with padding), as Secret `data` is encoded.
fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(A[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Secret `stringData` is write-only: the server folds it into `data`.
fn fold_string_data(obj: &mut Value) {
    let Some(Value::Object(sd)) = obj.as_object_mut().and_then(|m| m.remove("stringData")) else {
        return;
    };
    if !obj.get("data").is_some_and(Value::is_object) {
        obj["data"] = json!({});
    }
    for (k, v) in sd {
        if let Some(s) = v.as_str() {
            obj["data"][k] = base64(s.as_bytes()).into();
        }
    }
}

/// The few defaults controllers rely on seeing.
fn defaults(res: &Resource, obj: &mut Value) {
    match res.id {
        "secrets" => {
            fold_string_data(obj);
            if obj
                .get("type")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                obj["type"] = "Opaque".into();
            }
            return;
        }
        "services" => {
            if !obj.get("spec").is_some_and(Value::is_object) {
                obj["spec"] = json!({});
            }
            for (f, v) in [("type", "ClusterIP"), ("sessionAffinity", "None")] {
                if obj["spec"]
                    .get(f)
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    obj["spec"][f] = v.into();
                }
            }
            return;
        }
        _ => {}
    }
    if res.id == resources::PODS.id {
        crate::defaulting::pod(obj);
    }
    if res.id == resources::NAMESPACES.id {
        // The label kube-apiserver puts on every namespace, which webhook
        // namespaceSelectors commonly match on.
        let name = meta(obj, "name").unwrap_or_default();
        let m = meta_mut(obj);
        let labels = m.entry("labels").or_insert_with(|| json!({}));
        if !labels.is_object() {
            *labels = json!({});
        }
        labels["kubernetes.io/metadata.name"] = name.into();
    }
    let phase = match res.id {
        "pods" => "Pending",
        "namespaces" => "Active",
        _ => return,
    };
    if !obj.get("status").is_some_and(Value::is_object) {
        obj["status"] = json!({});
    }
    if obj.pointer("/status/phase").is_none() {
        obj["status"]["phase"] = phase.into();
    }
}
