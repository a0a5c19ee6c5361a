//! POST /bind: take the node lock, create the Binding (the pod carries the `allocating`
//! mark from /filter's annotation write, [`crate::bind_mark`]; one without it is marked
//! first).
//!
//! Every early return gives back what was taken (invariant 4,
//! `docs/architecture.md#invariants`): the node lock (unless this pod already held it
//! before this call) and the reservation. Every write names the pod's UID, so nothing
//! lands on a pod re-created under the same name. A bind is marked in flight for its
//! whole length ([`hami_k8s::lock::LocalBinds`]): a node lock whose unbound owner is not
//! in flight anywhere is taken over at once (`docs/extender.md#node-lock-takeover`).

use std::time::{Duration, Instant};

use hami_core::codec::decode_node_lock;
use hami_core::engine::PodPlan;
use hami_core::sync::MutexExt;
use hami_core::vendor::NodeLocks;
use hami_k8s::binding;
use hami_k8s::events::{EventType, Subject};
use hami_k8s::lock::{self, Acquired, BindInFlight, LOCKED_BIND_LIMIT, LockError};
use hami_k8s::patch::{MetadataPatch, PodRef, is_gone, patch_pod};
use hami_k8s::vendor_lock;
use hami_server::flags::format_go_duration;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use tracing::Instrument;

use crate::bind_mark;
use crate::metrics::{BindOutcome, ErrorReason, Operation};
use crate::service::{Extender, Failure, WriteState, fail, unix_now};
use crate::wire::{ExtenderBindingArgs, ExtenderBindingResult};

/// Longest a /bind waits for the pod's annotation write.
const WRITE_WAIT: Duration = Duration::from_secs(10);
/// Lock retries at least this often while waiting (a holder may vanish silently).
const LOCK_POLL_MAX: Duration = Duration::from_millis(500);

/// A failed API call: the pod being gone (or replaced) is its own (expected) reason.
fn api_failure(e: &kube::Error, message: String) -> Failure {
    let reason = if is_gone(e) {
        ErrorReason::PodGone
    } else {
        ErrorReason::Api
    };
    fail(reason, message)
}

/// Whether a failed bind's own requests can have bound its pod: [`Extender::give_back`]
/// reads the pod only then (or when another bind of it overlapped this one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sent {
    /// No Binding was sent (the failure came before it: the annotation write, a lock,
    /// the reservation, the bind-phase write, which binds nothing), or the API server
    /// refused it for a pod that is gone (404, or a failed UID precondition): it made
    /// none.
    NoBinding,
    /// The Binding was sent and may have been made: a timeout, an error after sending
    /// (5xx), 409 for a pod already assigned, the bind's time limit passed.
    Binding,
}

impl Sent {
    /// What a failed Binding request says about the Binding: a refusal for a gone pod
    /// proves none was made, anything else may hide one that was.
    fn by_binding(f: &Failure) -> Sent {
        if f.reason == ErrorReason::PodGone {
            Sent::NoBinding
        } else {
            Sent::Binding
        }
    }
}

/// What the read of a pod after its failed bind showed ([`Extender::give_back`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AfterAll {
    /// Bound to the node under the bind's UID: the bind stands.
    Bound,
    /// The locks stay: the pod of that name bound there is another one (the lock, which
    /// names pods by name, may be its own), or the pod could not be read.
    KeepLocks,
    /// Not bound to the node: the locks are given back.
    Unbound,
}

/// A lock attempt that failed for another reason than the node being locked.
fn lock_failure(e: LockError) -> Failure {
    match e {
        LockError::NodeNotFound(n) => fail(ErrorReason::NodeGone, format!("node {n} not found")),
        e => fail(ErrorReason::Api, e.to_string()),
    }
}

impl Extender {
    /// Answers one /bind call.
    pub async fn bind(&self, args: ExtenderBindingArgs) -> ExtenderBindingResult {
        let span = hami_server::pod_span!("bind", args.pod_namespace, args.pod_name, args.pod_uid);
        self.answer_bind(args).instrument(span).await
    }

    async fn answer_bind(&self, args: ExtenderBindingArgs) -> ExtenderBindingResult {
        let started = Instant::now();
        let pod = format!("{}/{}", args.pod_namespace, args.pod_name);
        let result = self.bind_inner(&args).await;
        let subject = Subject::pod(&args.pod_namespace, &args.pod_name, Some(&args.pod_uid));
        match result {
            Ok(()) => {
                tracing::info!(%pod, node = %args.node, "bind: bound");
                self.record_after_answer(
                    subject,
                    EventType::Normal,
                    "BindingSucceed",
                    format!("Successfully binding node [{}] to {pod}", args.node),
                );
                self.metrics
                    .bind_done(BindOutcome::Bound, started.elapsed());
                ExtenderBindingResult::default()
            }
            Err(f) => {
                tracing::warn!(%pod, node = %args.node, error = %f.message, "bind: failed");
                self.record_after_answer(
                    subject,
                    EventType::Warning,
                    "BindingFailed",
                    f.message.clone(),
                );
                self.metrics.error(Operation::Bind, f.reason);
                self.metrics
                    .bind_done(BindOutcome::Error, started.elapsed());
                ExtenderBindingResult { error: f.message }
            }
        }
    }

    /// Records the bind's event once the answer is on its way: handing it to the event
    /// writer wakes the main runtime's thread, which kube-scheduler need not wait for.
    /// The bind runs as a task of its own ([`Extender::bind`] is spawned); the task
    /// sending the answer is woken when it ends, and this one yields once to run after it.
    fn record_after_answer(
        &self,
        subject: Subject,
        kind: EventType,
        reason: &'static str,
        message: String,
    ) {
        let events = self.events.clone();
        tokio::spawn(async move {
            tokio::task::yield_now().await;
            events.record(subject, kind, reason, message);
        });
    }

    async fn bind_inner(&self, args: &ExtenderBindingArgs) -> Result<(), Failure> {
        if args.pod_name.is_empty() || args.pod_namespace.is_empty() || args.node.is_empty() {
            return Err(fail(
                ErrorReason::BadRequest,
                "binding args need PodName, PodNamespace and Node",
            ));
        }
        let (ns, name, node, uid) = (
            args.pod_namespace.as_str(),
            args.pod_name.as_str(),
            args.node.as_str(),
            args.pod_uid.as_str(),
        );
        let in_flight = self.binds.start(ns, name);
        let held = self.lock_state().holding_node(uid).map(str::to_string);
        tracing::trace!(%uid, ?held, "bind start");
        match held.as_deref() {
            Some(n) if n == node => {}
            Some(other) => {
                return Err(fail(
                    ErrorReason::WrongNode,
                    format!(
                        "pod {ns}/{name} was placed on node {other} by /filter, not on {node}; it must be filtered again"
                    ),
                ));
            }
            None => {
                self.await_write(uid, ns, name).await?;
                return self.bind_unreserved(ns, name, uid, node).await;
            }
        }
        self.lock_state().set_binding(uid, true, unix_now());
        let result = self.bind_reserved(ns, name, uid, node, &in_flight).await;
        let mut st = self.lock_state();
        let now = unix_now();
        match &result {
            Ok(()) => st.note_bound(uid, node, now),
            Err(_) => {
                st.abandon(uid, now);
            }
        }
        st.set_binding(uid, false, now);
        result
    }

    /// Binds a pod whose devices are held on `node` (and pinned against expiry).
    async fn bind_reserved(
        &self,
        ns: &str,
        name: &str,
        uid: &str,
        node: &str,
        in_flight: &BindInFlight,
    ) -> Result<(), Failure> {
        let pod = (ns, name, uid, node);
        // The locks of the vendors the pod holds devices of (docs/vendors.md#node-locks).
        let locks = {
            let st = self.lock_state();
            let held = st.vendors_held(uid);
            NodeLocks::for_vendors(&self.registry, held.iter().map(String::as_str))
        };
        // The node lock is taken while /filter's annotation write is still on its way:
        // both are needed before the Binding, neither needs the other (the device plugin
        // reads the pod only once it is bound), so their round trips overlap.
        let (written, took) = tokio::join!(self.await_write(uid, ns, name), async {
            if locks.shared {
                self.acquire_node_lock(node, ns, name).await.map(Some)
            } else {
                Ok(None)
            }
        });
        // A failed annotation write is the cause to report even when the lock failed
        // too (a fault that fails one write often fails both).
        if let Err(f) = written {
            let release_shared = matches!(&took, Ok(Some(a)) if *a != Acquired::Reentered);
            return self
                .give_back((f, Sent::NoBinding), pod, in_flight, release_shared, &[])
                .await;
        }
        let took = took?;
        let release_shared = took.as_ref().is_some_and(|a| *a != Acquired::Reentered);
        let mut stamped = Vec::new();
        for (key, expiry) in &locks.stamps {
            if let Err(f) = self.acquire_stamp_lock(node, key, *expiry).await {
                return self
                    .give_back(
                        (f, Sent::NoBinding),
                        pod,
                        in_flight,
                        release_shared,
                        &stamped,
                    )
                    .await;
            }
            stamped.push(key.clone());
        }
        // The hold may have ended while waiting (the pod was deleted or filtered again).
        let still = self.lock_state().holding_node(uid) == Some(node);
        let bound = if still {
            // Bounded, so another replica can tell an abandoned lock from this one
            // (`lock::PEER_BIND_GRACE`).
            tokio::time::timeout(LOCKED_BIND_LIMIT, self.bind_locked(ns, name, uid, node))
                .await
                .unwrap_or_else(|_| {
                    let f = fail(
                        ErrorReason::Api,
                        format!(
                            "pod {ns}/{name}: marking it allocating and binding it to {node} took over {}s; gave up",
                            LOCKED_BIND_LIMIT.as_secs()
                        ),
                    );
                    Err((f, Sent::Binding))
                })
        } else {
            let f = fail(
                ErrorReason::ReservationLost,
                format!(
                    "pod {ns}/{name} no longer holds GPUs on {node} (deleted or filtered again while waiting for the node lock)"
                ),
            );
            Err((f, Sent::NoBinding))
        };
        match bound {
            Ok(()) => Ok(()),
            Err(failed) => {
                self.give_back(failed, pod, in_flight, release_shared, &stamped)
                    .await
            }
        }
    }

    /// The failure path of a bind that holds node locks: gives back the node lock (when
    /// `release_shared`: this bind took it) and the vendors' `stamped` locks, unless the
    /// pod still needs them (`docs/extender.md#node-lock-takeover`):
    ///
    /// - another bind of the same pod is in flight here (kube-scheduler sends /bind again
    ///   once its call timed out, while the first still waits): it re-entered this lock
    ///   and may be creating the Binding now (the vendors' locks, which it cannot have
    ///   entered, are given back); or
    /// - the pod is bound to `node`, by such a bind or by this one's own Binding, which the
    ///   API server made though its answer failed or came too late. Its lock then waits
    ///   for kubelet's Allocate: released, it went to the next pod bound there, and the
    ///   device plugin answered this pod's Allocate with that pod's devices, each pod on
    ///   the node one off after it (`docs/architecture.md#chaos-run`).
    ///
    /// A pod bound here under this very UID is bound: the bind is answered as done. When
    /// the pod cannot be read, the locks stay; the lock sweep releases them within
    /// seconds if nobody needs them.
    ///
    /// The pod is read only when it can be bound: this bind sent its Binding and the
    /// failure does not prove none was made ([`Sent`]), or another bind of the pod ran
    /// during this one ([`BindInFlight::overlapped`]: only such a bind can have bound it
    /// under this bind's lock). Any other failure (the node lock not taken, the annotation
    /// write failed, the reservation lost, the bind-phase write failed, the Binding refused
    /// for a gone pod) gives back at once, without a read.
    async fn give_back(
        &self,
        (failure, sent): (Failure, Sent),
        (ns, name, uid, node): (&str, &str, &str, &str),
        in_flight: &BindInFlight,
        release_shared: bool,
        stamped: &[String],
    ) -> Result<(), Failure> {
        // Checked before the read: a bind of the pod that ends after this check created
        // its Binding (if any) before it ended, so the read below shows it.
        if self.binds.others_binding(ns, name) {
            // The vendors' locks are not re-entrant: the other bind waits for these.
            self.release_stamp_locks(node, stamped).await;
            tracing::info!(pod = %format!("{ns}/{name}"), %node, error = %failure.message, "bind failed while another bind of the pod is in flight; the node lock is left to it");
            return Err(failure);
        }
        if sent == Sent::Binding || in_flight.overlapped() {
            match self.bound_after_all(&failure, (ns, name, uid, node)).await {
                AfterAll::Bound => return Ok(()),
                AfterAll::KeepLocks => return Err(failure),
                AfterAll::Unbound => {}
            }
        }
        self.release_stamp_locks(node, stamped).await;
        if release_shared {
            self.release_lock(node, ns, name).await;
        }
        Err(failure)
    }

    /// Reads the pod after a failed bind that may have left it bound to `node`.
    async fn bound_after_all(
        &self,
        failure: &Failure,
        (ns, name, uid, node): (&str, &str, &str, &str),
    ) -> AfterAll {
        let pods: Api<Pod> = Api::namespaced(self.api.get(), ns);
        match pods.get_opt(name).await {
            Ok(Some(p)) if hami_core::pod::bound_node(&p) == Some(node) => {
                if p.metadata.uid.as_deref() == Some(uid) {
                    tracing::info!(pod = %format!("{ns}/{name}"), %node, error = %failure.message, "the pod is bound to the node after all; the bind stands and its lock waits for the device plugin");
                    return AfterAll::Bound;
                }
                // Its successor under the same name, bound here: the lock (which names
                // pods by name) may be that pod's own.
                tracing::info!(pod = %format!("{ns}/{name}"), %node, "the pod of this name bound to the node is another one; its node lock is left alone");
                AfterAll::KeepLocks
            }
            Ok(_) => AfterAll::Unbound,
            Err(e) => {
                tracing::warn!(pod = %format!("{ns}/{name}"), %node, error = %e, "cannot read the pod after a failed bind; its node locks stay until the lock sweep judges them");
                AfterAll::KeepLocks
            }
        }
    }

    /// Marks the pod and creates the Binding, with the node lock held; a failure says
    /// whether the Binding may have been made ([`Sent`]).
    async fn bind_locked(
        &self,
        ns: &str,
        name: &str,
        uid: &str,
        node: &str,
    ) -> Result<(), (Failure, Sent)> {
        // Marked by /filter's annotation write as a rule; annotations written otherwise
        // (by HAMi, an older version) are marked here, as HAMi does.
        if !self.lock_state().bind_marked(uid) {
            let phase = bind_mark::mark(MetadataPatch::new(), unix_now());
            if let Err(e) = patch_pod(&self.api.get(), PodRef::new(ns, name, uid), &phase).await {
                // Landed or not, the mark binds nothing: an unbound pod carrying it means
                // nothing to anyone (`docs/extender.md#flow`).
                let f = api_failure(
                    &e,
                    format!("could not mark pod {ns}/{name} allocating: {e}"),
                );
                return Err((f, Sent::NoBinding));
            }
        }
        self.create_binding(ns, name, uid, node).await.map_err(|f| {
            let sent = Sent::by_binding(&f);
            (f, sent)
        })
    }

    /// Creates the Binding of the pod with `uid` (the API server's precondition: a pod
    /// re-created under the same name is refused with 409).
    async fn create_binding(
        &self,
        ns: &str,
        name: &str,
        uid: &str,
        node: &str,
    ) -> Result<(), Failure> {
        binding::create_binding(&self.api.get(), PodRef::new(ns, name, uid), node)
            .await
            .map_err(|e| api_failure(&e, format!("could not bind pod {ns}/{name} to {node}: {e}")))
    }

    /// A pod without a reservation: fine if it asks for no managed device (kube-scheduler
    /// sends every pod of the profile when no managedResources are configured),
    /// otherwise it must pass /filter first.
    async fn bind_unreserved(
        &self,
        ns: &str,
        name: &str,
        uid: &str,
        node: &str,
    ) -> Result<(), Failure> {
        let pods: Api<Pod> = Api::namespaced(self.api.get(), ns);
        let pod = match pods.get_opt(name).await {
            Ok(Some(p)) => p,
            Ok(None) => {
                return Err(fail(
                    ErrorReason::PodGone,
                    format!("pod {ns}/{name} not found"),
                ));
            }
            Err(e) => {
                return Err(fail(
                    ErrorReason::Api,
                    format!("could not read pod {ns}/{name}: {e}"),
                ));
            }
        };
        let found = pod.metadata.uid.as_deref().unwrap_or_default();
        if !uid.is_empty() && found != uid {
            return Err(fail(
                ErrorReason::PodGone,
                format!(
                    "pod {ns}/{name} with UID {uid} is gone; the pod of that name now is another one (UID {found})"
                ),
            ));
        }
        let asks = PodPlan::new(&pod, &self.registry, &self.settings.defaults)
            .map(|p| !p.is_empty())
            .unwrap_or(true);
        if asks {
            return Err(fail(
                ErrorReason::NotReserved,
                format!(
                    "pod {ns}/{name} holds no GPU reservation on node {node} (filtered by another scheduler instance, expired after {}s, or its annotation write failed); it must be filtered again",
                    self.settings.reservation_timeout.as_secs()
                ),
            ));
        }
        self.create_binding(ns, name, found, node).await
    }

    /// Waits for the pod's annotation write from /filter, if one is in flight.
    async fn await_write(&self, uid: &str, ns: &str, name: &str) -> Result<(), Failure> {
        let pending = self.writes.lock_unpoisoned().get(uid).cloned();
        let Some(mut rx) = pending else {
            return Ok(());
        };
        let state = {
            let waited =
                tokio::time::timeout(WRITE_WAIT, rx.wait_for(|s| *s != WriteState::Pending)).await;
            match waited {
                Ok(Ok(s)) => s.clone(),
                Ok(Err(_)) => WriteState::Failed("annotation writer stopped".into()),
                Err(_) => {
                    WriteState::Failed(format!("still pending after {}s", WRITE_WAIT.as_secs()))
                }
            }
        };
        if state != WriteState::Written {
            // Reported once; a new /filter starts a new write.
            let mut writes = self.writes.lock_unpoisoned();
            if writes.get(uid).is_some_and(|r| r.same_channel(&rx)) {
                writes.remove(uid);
            }
        }
        match state {
            WriteState::Written => Ok(()),
            WriteState::Pending | WriteState::Failed(_) => {
                let why = match state {
                    WriteState::Failed(e) => e,
                    _ => "unknown".into(),
                };
                Err(fail(
                    ErrorReason::AnnotateFailed,
                    format!(
                        "pod {ns}/{name} could not be annotated with its GPU assignment: {why}"
                    ),
                ))
            }
        }
    }

    /// Takes the node lock, waiting (bounded) while another live pod holds it. Binds
    /// onto one node queue here in arrival order, so only the first polls the API.
    async fn acquire_node_lock(
        &self,
        node: &str,
        ns: &str,
        name: &str,
    ) -> Result<Acquired, Failure> {
        // The lock's own owner (a retried bind) takes it back at once: queued behind the
        // pods waiting for that very lock, it would only wait for them to give up.
        if self.owns_lock(node, ns, name) {
            match self.try_lock(node, ns, name, None).await {
                Ok(a) => return Ok(a),
                Err(e) if e.is_held() => {}
                Err(e) => return Err(lock_failure(e)),
            }
        }
        // The first attempt, once this bind's turn on the node has come, starts from the
        // node watch's view when that shows the node unlocked (no read before the write);
        // later ones, after waiting for a holder, read the node afresh.
        let mut first = true;
        self.acquire_waiting(node, || {
            let seen = std::mem::take(&mut first)
                .then(|| self.unlocked_at(node))
                .flatten();
            self.try_lock(node, ns, name, seen)
        })
        .await
    }

    /// Takes a vendor's own time-stamp lock (Cambricon's), waiting like for the node lock.
    async fn acquire_stamp_lock(
        &self,
        node: &str,
        key: &str,
        expiry: Duration,
    ) -> Result<(), Failure> {
        let client = self.api.get();
        self.acquire_waiting(node, || {
            vendor_lock::try_acquire(&client, node, key, expiry)
        })
        .await
    }

    /// Runs `attempt` until it takes its lock, waiting (bounded by `--node-lock-wait`)
    /// while the lock is held, on the node's queue.
    async fn acquire_waiting<T, Fut>(
        &self,
        node: &str,
        mut attempt: impl FnMut() -> Fut,
    ) -> Result<T, Failure>
    where
        Fut: std::future::Future<Output = Result<T, LockError>>,
    {
        let started = Instant::now();
        let deadline = started + self.settings.node_lock_wait;
        let queue = self.node_queue(node);
        let _turn = match tokio::time::timeout_at(deadline.into(), queue.lock()).await {
            Ok(g) => g,
            Err(_) => {
                return Err(fail(
                    ErrorReason::LockTimeout,
                    self.locked_message(node, "other pods are binding to it"),
                ));
            }
        };
        let mut delay = Duration::from_millis(20);
        let mut changes = self.node_changes.subscribe();
        let mut waited = false;
        loop {
            match attempt().await {
                Ok(a) => {
                    if waited {
                        self.metrics.lock_waited(started.elapsed());
                    }
                    return Ok(a);
                }
                Err(e @ LockError::Held { .. }) | Err(e @ LockError::Contended { .. }) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return Err(fail(
                            ErrorReason::LockTimeout,
                            self.locked_message(node, &e.to_string()),
                        ));
                    }
                    // Wake on any node change (the device plugin releasing the lock) or
                    // on the poll timer, whichever comes first.
                    waited = true;
                    let wait = delay.min(deadline - now);
                    let _ = tokio::time::timeout(wait, changes.changed()).await;
                    delay = (delay * 2).min(LOCK_POLL_MAX);
                }
                Err(e) => return Err(lock_failure(e)),
            }
        }
    }

    /// Gives back the vendors' time-stamp locks a failed bind took.
    async fn release_stamp_locks(&self, node: &str, keys: &[String]) {
        for key in keys {
            if let Err(e) = vendor_lock::release(&self.api.get(), node, key).await {
                tracing::error!(%node, lock = %key, error = %e, "could not release a vendor node lock; it expires on its own");
                self.metrics
                    .error(Operation::Bind, ErrorReason::LockReleaseFailed);
            }
        }
    }

    /// Why /bind gave up on a locked node. With `--node-lock-wait 0` (fail at once, as
    /// HAMi does) the text starts with HAMi's own words for a locked node
    /// (`docs/protocol.md#node-lock`), so what operators grep for matches.
    fn locked_message(&self, node: &str, detail: &str) -> String {
        let wait = self.settings.node_lock_wait;
        if wait.is_zero() {
            format!(
                "node {node} has been locked within {} ({detail})",
                format_go_duration(self.settings.node_lock_timeout)
            )
        } else {
            format!(
                "node {node} stayed locked: {detail}; gave up after waiting {} (--node-lock-wait)",
                format_go_duration(wait)
            )
        }
    }

    /// One attempt at the node lock, taking over a lock nobody is binding; `unlocked_at`:
    /// the resourceVersion at which the node watch showed the node unlocked, written
    /// against without reading the node first.
    async fn try_lock(
        &self,
        node: &str,
        ns: &str,
        name: &str,
        unlocked_at: Option<String>,
    ) -> Result<Acquired, LockError> {
        let timeout = self.settings.node_lock_timeout;
        match unlocked_at {
            Some(version) => {
                lock::try_acquire_seen_unlocked(
                    &self.api.get(),
                    node,
                    ns,
                    name,
                    timeout,
                    &self.binds,
                    &version,
                )
                .await
            }
            None => {
                lock::try_acquire_with(&self.api.get(), node, ns, name, timeout, &self.binds).await
            }
        }
    }

    /// The resourceVersion of the node as the node watch last showed it, when that showed
    /// no node lock.
    fn unlocked_at(&self, node: &str) -> Option<String> {
        let st = self.lock_state();
        let n = st.node(node)?;
        if n.lock.is_some() {
            return None;
        }
        n.resource_version.clone()
    }

    /// Whether the node's lock names pod `ns/name`, as the node watch last showed it.
    fn owns_lock(&self, node: &str, ns: &str, name: &str) -> bool {
        self.lock_state()
            .node(node)
            .and_then(|n| n.lock.as_deref())
            .and_then(|v| decode_node_lock(v).ok())
            .is_some_and(|l| l.is_owned_by(ns, name))
    }

    pub(crate) async fn release_lock(&self, node: &str, ns: &str, name: &str) {
        let released = lock::release(&self.api.get(), node, ns, name).await;
        // Binds of this process queued on the node try again now, not at the watch's
        // echo of the release.
        self.node_changes.send_modify(|v| *v = v.wrapping_add(1));
        if let Err(e) = released {
            tracing::error!(%node, pod = %format!("{ns}/{name}"), error = %e, "could not release the node lock; it expires after --node-lock-timeout");
            self.metrics
                .error(Operation::Bind, ErrorReason::LockReleaseFailed);
        }
    }
}
