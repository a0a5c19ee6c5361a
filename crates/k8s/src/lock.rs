//! HAMi's node lock (`docs/protocol.md#node-lock`): annotation `hami.io/mutex.lock` on the
//! node, value `<RFC3339>,<namespace>,<pod>`, taken by the scheduler at Bind and released
//! by the device plugin once the pod's devices are allocated (or by the scheduler when Bind
//! fails).
//!
//! Every write carries the node's resourceVersion, so two lockers racing for one node
//! cannot both win: the loser gets 409, re-reads and sees the winner. A lock is taken over
//! when it expired, when its owner pod no longer exists or has finished allocating, and —
//! unlike HAMi, where such a value blocks the node forever — when its value is malformed.
//! A scheduler that knows its own binds ([`LocalBinds`], [`try_acquire_with`]) also takes
//! over a lock whose owner is still unbound and that nobody is binding: the scheduler that
//! took it stopped mid-bind (`docs/extender.md#node-lock-takeover`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use hami_core::sync::MutexExt;

use chrono::{DateTime, FixedOffset, Utc};
use hami_core::annotations::{BIND_PHASE, NODE_LOCK};
use hami_core::codec::{NodeLock, decode_node_lock, encode_node_lock, release_allowed};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::Api;
use tokio_util::sync::CancellationToken;

use crate::patch::{MetadataPatch, is_conflict, is_not_found, patch_node};

/// HAMi's default lock expiry.
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(300);

/// The longest a bind may hold a node lock with its pod still unbound: a bind that has
/// not created its Binding this long after taking the lock gives up (and releases it).
pub const LOCKED_BIND_LIMIT: Duration = Duration::from_secs(10);

/// Where other scheduler replicas may bind (leader election), how old a lock of an
/// unbound pod that this process is not binding must be before it counts as abandoned:
/// well past [`LOCKED_BIND_LIMIT`], so a live bind of another replica is never robbed.
pub const PEER_BIND_GRACE: Duration = Duration::from_secs(30);

/// Conflicts (409) are retried at once with a fresh read, this many times.
const CONFLICT_RETRIES: usize = 16;
/// Other API errors are retried with backoff (100 ms, ×2), this many times.
const ERROR_RETRIES: u32 = 5;

/// Why a lock operation failed.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("node {node} is locked by pod {owner} since {since} (lock expires after {timeout:?})")]
    Held {
        node: String,
        owner: String,
        since: String,
        timeout: Duration,
    },
    #[error("node {0} not found")]
    NodeNotFound(String),
    #[error("node {node}: lock still contended after {CONFLICT_RETRIES} conflicting writes")]
    Contended { node: String },
    #[error("node {node}: {source}")]
    Api { node: String, source: kube::Error },
}

impl LockError {
    /// True when another pod holds the lock (waiting may help).
    pub fn is_held(&self) -> bool {
        matches!(self, LockError::Held { .. } | LockError::Contended { .. })
    }
}

/// How a lock was obtained.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquired {
    /// The node was free.
    Taken,
    /// The same pod already held it (multi-vendor pods and retried binds lock twice).
    Reentered,
    /// Someone else's lock was dropped first, for the reason given.
    TookOver(Takeover),
}

/// Why a lock held by someone else was taken over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Takeover {
    Expired {
        owner: String,
    },
    /// The owner pod is gone, or has already been allocated (bind-phase success/failed).
    Dangling {
        owner: String,
    },
    /// The value does not decode: nobody can prove to own it.
    Malformed {
        value: String,
    },
    /// The owner pod is still unbound and nobody is binding it: the scheduler that took
    /// the lock stopped mid-bind (killed, restarted, its call cancelled).
    Abandoned {
        owner: String,
    },
}

/// The binds this process has in flight, by pod, and whether other processes may bind
/// too: what tells a lock whose owner nobody is binding from a live one.
#[derive(Debug)]
pub struct LocalBinds {
    in_flight: Mutex<InFlight>,
    /// `None`: this process is the only one that binds (no leader election), so an
    /// unbound owner it is not binding is abandoned. `Some(g)`: other replicas may be
    /// binding; the lock must also be `g` old.
    peer_grace: Option<Duration>,
    /// Cancelled when this process begins to shut down (`LocalBinds::stops_with`).
    shutdown: OnceLock<CancellationToken>,
}

/// A pod's key: namespace and name.
type PodKey = (String, String);

/// The binds in flight by pod, and the readers of owner pods (and the binds in flight)
/// waiting to learn whether a bind of that pod started or ended meanwhile.
#[derive(Debug, Default)]
struct InFlight {
    binds: HashMap<PodKey, usize>,
    watches: HashMap<PodKey, Vec<Arc<AtomicBool>>>,
}

impl InFlight {
    /// A bind of `key` started or ended: every read of that pod in progress is stale,
    /// and every other bind of it in flight overlapped this one.
    fn touch(&self, key: &PodKey) {
        for w in self.watches.get(key).into_iter().flatten() {
            w.store(true, Ordering::SeqCst);
        }
    }

    /// Stops telling `touched` about binds of `key`.
    fn unwatch(&mut self, key: &PodKey, touched: &Arc<AtomicBool>) {
        if let Some(ws) = self.watches.get_mut(key) {
            ws.retain(|w| !Arc::ptr_eq(w, touched));
            if ws.is_empty() {
                self.watches.remove(key);
            }
        }
    }
}

/// Marks a read of an owner pod: whether a bind of it started or ended since
/// (`docs/extender.md#node-lock-takeover`).
struct OwnerRead<'a> {
    binds: &'a LocalBinds,
    key: PodKey,
    touched: Arc<AtomicBool>,
}

impl OwnerRead<'_> {
    fn touched(&self) -> bool {
        self.touched.load(Ordering::SeqCst)
    }
}

impl Drop for OwnerRead<'_> {
    fn drop(&mut self) {
        self.binds
            .in_flight
            .lock_unpoisoned()
            .unwatch(&self.key, &self.touched);
    }
}

impl LocalBinds {
    /// This process is the only scheduler that binds.
    pub fn sole() -> Arc<Self> {
        Arc::new(LocalBinds {
            in_flight: Mutex::default(),
            peer_grace: None,
            shutdown: OnceLock::new(),
        })
    }

    /// Other replicas may bind as well (leader election hands binds from one to
    /// another); their locks are judged abandoned only `grace` after they were taken.
    pub fn with_peers(grace: Duration) -> Arc<Self> {
        Arc::new(LocalBinds {
            in_flight: Mutex::default(),
            peer_grace: Some(grace),
            shutdown: OnceLock::new(),
        })
    }

    /// Judges no lock abandoned once `shutdown` is cancelled. A process that is stopping
    /// (or was killed while its HTTP thread still finishes a bind) no longer knows every
    /// bind: its successor may already be binding the owner it finds unbound, and taking
    /// that lock would let the device plugin answer the owner's Allocate for the wrong pod
    /// (`docs/extender.md#node-lock-takeover`). Its lock is then left to expire or to the
    /// stale-lock sweep of the process that stays. The first token given is kept.
    pub fn stops_with(&self, shutdown: CancellationToken) {
        let _ = self.shutdown.set(shutdown);
    }

    /// Whether this process has begun to shut down ([`LocalBinds::stops_with`]).
    fn stopping(&self) -> bool {
        self.shutdown
            .get()
            .is_some_and(CancellationToken::is_cancelled)
    }

    /// Marks a bind of pod `namespace/name` as in flight until the guard is dropped.
    pub fn start(self: &Arc<Self>, namespace: &str, name: &str) -> BindInFlight {
        let key = (namespace.to_string(), name.to_string());
        let mut st = self.in_flight.lock_unpoisoned();
        let binds = st.binds.entry(key.clone()).or_default();
        *binds += 1;
        // Another bind of the pod in flight now overlaps this one from its start.
        let overlapped = Arc::new(AtomicBool::new(*binds > 1));
        st.touch(&key);
        st.watches
            .entry(key.clone())
            .or_default()
            .push(overlapped.clone());
        drop(st);
        BindInFlight {
            binds: self.clone(),
            key,
            overlapped,
        }
    }

    /// Whether this process is binding pod `namespace/name` now.
    pub fn is_binding(&self, namespace: &str, name: &str) -> bool {
        self.in_flight
            .lock_unpoisoned()
            .binds
            .contains_key(&(namespace.to_string(), name.to_string()))
    }

    /// Whether a bind of pod `namespace/name` other than the caller's own is in flight
    /// here; the caller's bind is marked ([`LocalBinds::start`]). Two binds of one pod
    /// share its node lock (the second re-enters it), so the one that fails must leave
    /// the lock to the other (`docs/extender.md#node-lock-takeover`).
    pub fn others_binding(&self, namespace: &str, name: &str) -> bool {
        self.in_flight
            .lock_unpoisoned()
            .binds
            .get(&(namespace.to_string(), name.to_string()))
            .is_some_and(|n| *n > 1)
    }

    /// Starts a read of owner pod `namespace/name`; taken before the read is sent.
    fn read_owner(&self, namespace: &str, name: &str) -> OwnerRead<'_> {
        let key = (namespace.to_string(), name.to_string());
        let touched = Arc::new(AtomicBool::new(false));
        self.in_flight
            .lock_unpoisoned()
            .watches
            .entry(key.clone())
            .or_default()
            .push(touched.clone());
        OwnerRead {
            binds: self,
            key,
            touched,
        }
    }

    /// Whether a lock taken at `taken` for `owner` (the pod as `read` returned it) is
    /// abandoned: the owner is unbound (bound, the device plugin releases the lock once it
    /// allocated), this process is not binding it and neither started nor ended a bind of
    /// it while the read was under way (a bind that ended then may have created its
    /// Binding after the read was answered), and no other replica can still be binding it.
    fn abandoned(
        &self,
        owner: &Pod,
        read: &OwnerRead<'_>,
        taken: &DateTime<FixedOffset>,
        now: &DateTime<Utc>,
    ) -> bool {
        let (ns, name) = (read.key.0.as_str(), read.key.1.as_str());
        let held = now
            .signed_duration_since(taken)
            .to_std()
            .unwrap_or_default();
        !self.stopping()
            && hami_core::pod::bound_node(owner).is_none()
            && !read.touched()
            && !self.is_binding(ns, name)
            && self.peer_grace.is_none_or(|grace| held >= grace)
    }
}

/// A bind in flight; dropping it ends it.
#[derive(Debug)]
pub struct BindInFlight {
    binds: Arc<LocalBinds>,
    key: (String, String),
    /// Set while another bind of the same pod is or was in flight with this one.
    overlapped: Arc<AtomicBool>,
}

impl BindInFlight {
    /// Whether another bind of the same pod (namespace and name) ran here at any time
    /// during this one: in flight when it started, or started or ended since. Only such a
    /// bind can have bound the pod under this one's node lock (the second re-enters the
    /// first's lock), so a failed bind that sent no Binding itself and was never
    /// overlapped has no bound pod to look for (`docs/extender.md#node-lock-takeover`).
    pub fn overlapped(&self) -> bool {
        self.overlapped.load(Ordering::SeqCst)
    }
}

impl Drop for BindInFlight {
    fn drop(&mut self) {
        let mut st = self.binds.in_flight.lock_unpoisoned();
        st.unwatch(&self.key, &self.overlapped);
        if let Some(n) = st.binds.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                st.binds.remove(&self.key);
            }
        }
        st.touch(&self.key);
    }
}

/// What a release did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Released {
    Released,
    /// There was no lock.
    NotLocked,
    /// The lock belongs to another pod and was left alone.
    HeldByOther {
        value: String,
    },
}

/// The current lock of `node`, `None` when unlocked. A malformed value is an error.
pub async fn current(client: &Client, node: &str) -> Result<Option<NodeLock>, CurrentError> {
    let n = get_node(client, node).await.map_err(CurrentError::Lock)?;
    match lock_value(&n) {
        None => Ok(None),
        Some(v) => decode_node_lock(v)
            .map(Some)
            .map_err(|e| CurrentError::Malformed {
                node: node.to_string(),
                error: e.to_string(),
            }),
    }
}

/// Why the current lock could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CurrentError {
    #[error(transparent)]
    Lock(LockError),
    #[error("node {node}: malformed {NODE_LOCK} annotation: {error}")]
    Malformed { node: String, error: String },
}

/// Takes the lock of `node` for pod `namespace/pod`, once: if another live pod holds a
/// fresh lock this returns [`LockError::Held`] at once (callers wait and retry).
pub async fn try_acquire(
    client: &Client,
    node: &str,
    namespace: &str,
    pod: &str,
    timeout: Duration,
) -> Result<Acquired, LockError> {
    acquire(client, node, namespace, pod, timeout, None, None).await
}

/// [`try_acquire`] for a scheduler that knows its binds: a lock whose owner is unbound
/// and that nobody binds is taken over too ([`Takeover::Abandoned`]).
pub async fn try_acquire_with(
    client: &Client,
    node: &str,
    namespace: &str,
    pod: &str,
    timeout: Duration,
    binds: &LocalBinds,
) -> Result<Acquired, LockError> {
    try_acquire_seen_unlocked(client, node, namespace, pod, timeout, binds, "").await
}

/// [`try_acquire_with`] starting from what a watch of the node last showed: no lock at
/// `resourceVersion` `unlocked_at`. The first write is guarded by that version, with no
/// read before it; the API server refuses it (409) if the node changed since, and only
/// then is the node read afresh and the lock judged as usual. A stale view costs one
/// refused write, never a lock taken from someone (`docs/extender.md#flow`). An empty
/// `unlocked_at` is no view: the node is read first ([`try_acquire_with`]).
pub async fn try_acquire_seen_unlocked(
    client: &Client,
    node: &str,
    namespace: &str,
    pod: &str,
    timeout: Duration,
    binds: &LocalBinds,
    unlocked_at: &str,
) -> Result<Acquired, LockError> {
    let seen = Some(unlocked_at).filter(|rv| !rv.is_empty());
    acquire(client, node, namespace, pod, timeout, Some(binds), seen).await
}

async fn acquire(
    client: &Client,
    node: &str,
    namespace: &str,
    pod: &str,
    timeout: Duration,
    binds: Option<&LocalBinds>,
    mut unlocked_at: Option<&str>,
) -> Result<Acquired, LockError> {
    let mut errors = 0;
    for _ in 0..CONFLICT_RETRIES {
        let (how, version) = match unlocked_at.take() {
            Some(version) => (Acquired::Taken, version.to_string()),
            None => {
                let n = match get_node(client, node).await {
                    Ok(n) => n,
                    Err(LockError::Api { source, .. }) if errors < ERROR_RETRIES => {
                        errors += 1;
                        backoff(errors, node, &source).await;
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                let how = match lock_value(&n) {
                    None => Acquired::Taken,
                    Some(value) => {
                        match judge(client, node, (namespace, pod), value, timeout, binds).await? {
                            Verdict::Mine => return Ok(Acquired::Reentered),
                            Verdict::Free(t) => Acquired::TookOver(t),
                            Verdict::Held(e) => return Err(e),
                        }
                    }
                };
                (how, resource_version(&n))
            }
        };
        let now: DateTime<FixedOffset> = Utc::now().fixed_offset();
        let value = encode_node_lock(&NodeLock::owned(now, namespace, pod));
        let patch = MetadataPatch::new()
            .annotate(NODE_LOCK, value)
            .guarded_by(version);
        match patch_node(client, node, &patch).await {
            Ok(_) => {
                if let Acquired::TookOver(t) = &how {
                    tracing::warn!(%node, pod = %format!("{namespace}/{pod}"), takeover = ?t, "took over node lock");
                }
                return Ok(how);
            }
            Err(e) if is_conflict(&e) => continue,
            Err(e) if is_not_found(&e) => return Err(LockError::NodeNotFound(node.to_string())),
            Err(source) if errors < ERROR_RETRIES => {
                errors += 1;
                backoff(errors, node, &source).await;
            }
            Err(source) => {
                return Err(LockError::Api {
                    node: node.to_string(),
                    source,
                });
            }
        }
    }
    Err(LockError::Contended {
        node: node.to_string(),
    })
}

/// Releases the lock of `node` if pod `namespace/pod` holds it (or it is a legacy,
/// owner-less value). A lock of another pod is left alone.
pub async fn release(
    client: &Client,
    node: &str,
    namespace: &str,
    pod: &str,
) -> Result<Released, LockError> {
    release_if(client, node, |v| release_allowed(v, namespace, pod)).await
}

/// Releases whatever lock `node` has (used after deciding to take it over).
pub async fn force_release(client: &Client, node: &str) -> Result<Released, LockError> {
    release_if(client, node, |_| true).await
}

async fn release_if(
    client: &Client,
    node: &str,
    allowed: impl Fn(&str) -> bool,
) -> Result<Released, LockError> {
    let mut errors = 0;
    for _ in 0..CONFLICT_RETRIES {
        let n = match get_node(client, node).await {
            Ok(n) => n,
            Err(LockError::NodeNotFound(_)) => return Ok(Released::NotLocked),
            Err(LockError::Api { source, .. }) if errors < ERROR_RETRIES => {
                errors += 1;
                backoff(errors, node, &source).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        let Some(value) = lock_value(&n) else {
            return Ok(Released::NotLocked);
        };
        if !allowed(value) {
            return Ok(Released::HeldByOther {
                value: value.to_string(),
            });
        }
        let patch = MetadataPatch::new()
            .remove_annotation(NODE_LOCK)
            .guarded_by(resource_version(&n));
        match patch_node(client, node, &patch).await {
            Ok(_) => return Ok(Released::Released),
            Err(e) if is_conflict(&e) => continue,
            Err(e) if is_not_found(&e) => return Ok(Released::NotLocked),
            Err(source) if errors < ERROR_RETRIES => {
                errors += 1;
                backoff(errors, node, &source).await;
            }
            Err(source) => {
                return Err(LockError::Api {
                    node: node.to_string(),
                    source,
                });
            }
        }
    }
    Err(LockError::Contended {
        node: node.to_string(),
    })
}

/// Releases the lock of `node` when a bind would take it over now (expired, dangling,
/// malformed or abandoned), returning why; `Ok(None)`: no lock, a live one, or one that
/// changed since it was read (judged again next time). A bind takes such a lock over
/// anyway; this is for the lock left after the last bind to a node, which no later bind
/// comes to take over (`docs/extender.md#node-lock-takeover`).
pub async fn release_stale(
    client: &Client,
    node: &str,
    timeout: Duration,
    binds: &LocalBinds,
) -> Result<Option<Takeover>, LockError> {
    let n = get_node(client, node).await?;
    let Some(value) = lock_value(&n) else {
        return Ok(None);
    };
    // No pod claims it: only a lock that is free to anyone is released.
    let Verdict::Free(why) = judge(client, node, ("", ""), value, timeout, Some(binds)).await?
    else {
        return Ok(None);
    };
    let patch = MetadataPatch::new()
        .remove_annotation(NODE_LOCK)
        .guarded_by(resource_version(&n));
    match patch_node(client, node, &patch).await {
        Ok(_) => {
            tracing::warn!(%node, takeover = ?why, "released a stale node lock");
            Ok(Some(why))
        }
        Err(e) if is_conflict(&e) || is_not_found(&e) => Ok(None),
        Err(source) => Err(LockError::Api {
            node: node.to_string(),
            source,
        }),
    }
}

enum Verdict {
    Mine,
    Free(Takeover),
    Held(LockError),
}

/// Decides what an existing lock value means for pod `namespace/pod`.
async fn judge(
    client: &Client,
    node: &str,
    (namespace, pod): (&str, &str),
    value: &str,
    timeout: Duration,
    binds: Option<&LocalBinds>,
) -> Result<Verdict, LockError> {
    let lock = match decode_node_lock(value) {
        Ok(l) => l,
        Err(_) => {
            return Ok(Verdict::Free(Takeover::Malformed {
                value: value.to_string(),
            }));
        }
    };
    if lock.is_owned_by(namespace, pod) {
        return Ok(Verdict::Mine);
    }
    let owner = lock.owner.as_ref().map_or_else(
        || "<unknown>".to_string(),
        |o| format!("{}/{}", o.namespace, o.name),
    );
    let now = Utc::now();
    if lock.is_expired(&now, timeout) {
        return Ok(Verdict::Free(Takeover::Expired { owner }));
    }
    if let Some(o) = &lock.owner {
        let pods: Api<Pod> = Api::namespaced(client.clone(), &o.namespace);
        // Marked before the read is sent: see `LocalBinds::abandoned`.
        let read = binds.map(|b| b.read_owner(&o.namespace, &o.name));
        match pods.get_opt(&o.name).await {
            Ok(None) => return Ok(Verdict::Free(Takeover::Dangling { owner })),
            Ok(Some(p)) if owner_done(&p, node) => {
                return Ok(Verdict::Free(Takeover::Dangling { owner }));
            }
            Ok(Some(p))
                if binds
                    .zip(read.as_ref())
                    .is_some_and(|(b, r)| b.abandoned(&p, r, &lock.acquired_at, &now)) =>
            {
                return Ok(Verdict::Free(Takeover::Abandoned { owner }));
            }
            Ok(Some(_)) => {}
            Err(source) => {
                return Err(LockError::Api {
                    node: node.to_string(),
                    source,
                });
            }
        }
    }
    Ok(Verdict::Held(LockError::Held {
        node: node.to_string(),
        owner,
        since: lock.acquired_at.to_rfc3339(),
        timeout,
    }))
}

/// An owner pod that no longer needs the lock: its allocation finished (the device plugin
/// should have released it), it terminated, it was bound elsewhere, or it is being deleted
/// before kubelet could start admitting it.
///
/// A pod being deleted while it is bound here and still `allocating` keeps the lock until
/// it is gone: kubelet may be admitting it from a view of before the deletion, and the
/// device plugin matches that Allocate to the lock's owner. Taken over, the lock would name
/// the next pod, whose devices kubelet would then hand to the leaving one
/// (`docs/extender.md#node-lock-takeover`).
fn owner_done(pod: &Pod, node: &str) -> bool {
    let bound_to = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty());
    let bind_phase = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(BIND_PHASE))
        .map(String::as_str);
    let awaiting_allocation_here = bound_to == Some(node) && bind_phase == Some("allocating");
    hami_core::pod::is_terminal(pod)
        || matches!(bind_phase, Some("success" | "failed"))
        || (pod.metadata.deletion_timestamp.is_some() && !awaiting_allocation_here)
        || bound_to.is_some_and(|n| n != node)
}

async fn get_node(client: &Client, node: &str) -> Result<Node, LockError> {
    let api: Api<Node> = Api::all(client.clone());
    match api.get_opt(node).await {
        Ok(Some(n)) => Ok(n),
        Ok(None) => Err(LockError::NodeNotFound(node.to_string())),
        Err(source) => Err(LockError::Api {
            node: node.to_string(),
            source,
        }),
    }
}

fn lock_value(node: &Node) -> Option<&str> {
    node.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(NODE_LOCK))
        .map(String::as_str)
}

fn resource_version(node: &Node) -> String {
    node.metadata.resource_version.clone().unwrap_or_default()
}

async fn backoff(attempt: u32, node: &str, error: &kube::Error) {
    let delay = Duration::from_millis(100) * 2u32.saturating_pow(attempt.saturating_sub(1));
    tracing::debug!(%node, %error, ?delay, "node lock: API error, retrying");
    tokio::time::sleep(delay).await;
}
