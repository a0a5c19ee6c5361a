//! Background rounds: node registration health (handshakes), reservation expiry and the
//! release of stale node locks.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hami_core::sync::MutexExt;
use hami_core::vendor::{HealthRule, VendorRegistry};
use hami_k8s::events::{EventType, Recorder, Subject};
use hami_k8s::lock::{self, LocalBinds};
use hami_k8s::patch::{MetadataPatch, patch_node};
use hami_server::CancellationToken;
use kube::Client;
use tokio::sync::watch;

use crate::health::judge;
use crate::leader::Leadership;
use crate::metrics::Metrics;
use crate::service::unix_now;
use crate::state::SchedState;

/// How often unbound reservations are checked for expiry.
const EXPIRY_INTERVAL: Duration = Duration::from_secs(5);
/// Node events arriving in a burst are handled in one round.
const DEBOUNCE: Duration = Duration::from_millis(200);

/// What the registry round needs.
#[derive(Clone)]
pub struct Registry {
    pub state: Arc<Mutex<SchedState>>,
    pub registry: VendorRegistry,
    pub client: Client,
    pub leadership: Leadership,
    pub events: Recorder,
    pub interval: Duration,
    pub handshake_timeout: Duration,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("interval", &self.interval)
            .field("handshake_timeout", &self.handshake_timeout)
            .finish_non_exhaustive()
    }
}

struct Write {
    node: String,
    annotation: String,
    value: String,
}

struct Transition {
    node: String,
    uid: Option<String>,
    vendor: String,
    unhealthy: Option<String>,
}

impl Registry {
    /// Judges every node's device plugins on a timer and after node changes, until
    /// `shutdown`; fails if the feed of node changes closes.
    pub async fn run(
        self,
        mut changes: watch::Receiver<u64>,
        shutdown: CancellationToken,
    ) -> Result<(), String> {
        let mut tick = tokio::time::interval(self.interval.max(Duration::from_millis(100)));
        let mut seen: HashMap<(String, String), u64> = HashMap::new();
        let mut reported: HashMap<(String, String), String> = HashMap::new();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                _ = tick.tick() => {}
                c = changes.changed() => {
                    if c.is_err() {
                        return Err("the feed of node changes closed".into());
                    }
                    tokio::time::sleep(DEBOUNCE).await;
                    changes.borrow_and_update();
                }
            }
            let (writes, transitions) = self.round(&mut seen);
            self.report_registrations(&mut reported);
            for t in transitions {
                let subject = Subject::node(&t.node, t.uid.as_deref());
                match t.unhealthy {
                    Some(why) => {
                        tracing::warn!(node = %t.node, vendor = %t.vendor, reason = %why, "node devices taken out of scheduling");
                        self.events.record(
                            subject,
                            EventType::Warning,
                            "DevicePluginNotReporting",
                            format!("{} devices are not scheduled: {why}", t.vendor),
                        );
                    }
                    None => {
                        tracing::info!(node = %t.node, vendor = %t.vendor, "node devices back in scheduling");
                        self.events.record(
                            subject,
                            EventType::Normal,
                            "DevicePluginReporting",
                            format!("{} devices are scheduled again", t.vendor),
                        );
                    }
                }
            }
            if !self.leadership.is_leader() {
                continue;
            }
            for w in writes {
                let patch = MetadataPatch::new().annotate(&w.annotation, w.value);
                if let Err(e) = patch_node(&self.client, &w.node, &patch).await {
                    tracing::warn!(node = %w.node, error = %e, "could not write the node handshake");
                }
            }
        }
    }

    /// Node events for registrations that became invalid (only that vendor's devices
    /// on that node are out of scheduling) or valid again; `reported` remembers what
    /// was said.
    fn report_registrations(&self, reported: &mut HashMap<(String, String), String>) {
        let mut now_bad: HashMap<(String, String), (Option<String>, String)> = HashMap::new();
        {
            let st = self.state.lock_unpoisoned();
            for (name, entry) in st.nodes() {
                for i in entry.issues.iter().filter(|i| i.blocking) {
                    now_bad.insert(
                        (name.clone(), i.vendor.clone()),
                        (
                            entry.uid.clone(),
                            format!("{} is invalid: {}", i.annotation, i.error),
                        ),
                    );
                }
            }
        }
        for ((node, vendor), (uid, why)) in &now_bad {
            let key = (node.clone(), vendor.clone());
            if reported.get(&key) == Some(why) {
                continue;
            }
            tracing::warn!(%node, %vendor, reason = %why, "node devices of one vendor out of scheduling: invalid registration");
            self.events.record(
                Subject::node(node, uid.as_deref()),
                EventType::Warning,
                "InvalidDeviceRegistration",
                format!("{vendor} devices are not scheduled: {why}"),
            );
            reported.insert(key, why.clone());
        }
        let fixed: Vec<(String, String)> = reported
            .keys()
            .filter(|k| !now_bad.contains_key(*k))
            .cloned()
            .collect();
        for (node, vendor) in fixed {
            reported.remove(&(node.clone(), vendor.clone()));
            let uid = self
                .state
                .lock_unpoisoned()
                .node(&node)
                .and_then(|e| e.uid.clone());
            let Some(uid) = uid else {
                continue; // the node is gone: nothing to tell
            };
            tracing::info!(%node, %vendor, "node registration valid again");
            self.events.record(
                Subject::node(&node, Some(&uid)),
                EventType::Normal,
                "DeviceRegistrationValid",
                format!("{vendor} devices registration is valid again"),
            );
        }
    }

    /// One judgement of every node and vendor; returns handshake writes and health
    /// changes.
    fn round(&self, seen: &mut HashMap<(String, String), u64>) -> (Vec<Write>, Vec<Transition>) {
        let now = chrono::Local::now().naive_local();
        let mut st = self.state.lock_unpoisoned();
        let mut verdicts = Vec::new();
        let mut writes = Vec::new();
        for (name, entry) in st.nodes() {
            for (index, v) in self.registry.vendors().iter().enumerate() {
                let state = entry.vendor(index);
                let vendor = v.common_word();
                if !entry.inventory.vendors.iter().any(|g| g.vendor == vendor) {
                    continue;
                }
                let transition = |unhealthy| Transition {
                    node: name.clone(),
                    uid: entry.uid.clone(),
                    vendor: vendor.to_string(),
                    unhealthy,
                };
                let key = match v.health_rule() {
                    HealthRule::Always => {
                        verdicts.push(transition(None));
                        continue;
                    }
                    // No handshake: the plugin is alive while kubelet reports its
                    // resource (docs/vendors.md#health).
                    HealthRule::Capacity => {
                        let res = v.count_resource();
                        verdicts.push(transition(match state.capacity {
                            Some(n) if n > 0 => None,
                            Some(n) => Some(format!(
                                "device plugin not reporting: capacity {res} is {n}"
                            )),
                            None => Some(format!(
                                "device plugin not reporting: the node reports no capacity {res}"
                            )),
                        }));
                        continue;
                    }
                    HealthRule::Handshake(key) => key,
                };
                // A registration that changed since the last round proves the plugin is
                // alive, like an answer to the handshake.
                let registration = state.registration.unwrap_or_default();
                let fresh = seen
                    .insert((name.clone(), vendor.to_string()), registration)
                    .is_some_and(|old| old != registration);
                let answered = if fresh {
                    None
                } else {
                    state.handshake.as_deref()
                };
                let verdict = judge(
                    answered,
                    state.allocatable,
                    v.count_resource(),
                    now,
                    self.handshake_timeout,
                );
                if let Some(value) = verdict.write {
                    writes.push(Write {
                        node: name.clone(),
                        annotation: key.to_string(),
                        value,
                    });
                }
                verdicts.push(transition(verdict.unhealthy));
            }
        }
        seen.retain(|(n, _), _| st.node(n).is_some());
        // The verdicts that change a vendor's health.
        verdicts.retain(|t| st.set_vendor_health(&t.node, &t.vendor, t.unhealthy.clone()));
        (writes, verdicts)
    }
}

/// Ends the holds of pods that stayed unbound past the reservation timeout, until
/// `shutdown`.
pub async fn expire_reservations(
    state: Arc<Mutex<SchedState>>,
    metrics: Metrics,
    shutdown: CancellationToken,
) -> Result<(), std::convert::Infallible> {
    let mut tick = tokio::time::interval(EXPIRY_INTERVAL);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            _ = tick.tick() => {}
        }
        let expired = state.lock_unpoisoned().expire(unix_now());
        for e in &expired {
            tracing::info!(
                pod = %format!("{}/{}", e.namespace, e.name),
                node = %e.node,
                reservation = e.reservation,
                "pod stayed unbound past the reservation timeout; its GPUs are released"
            );
        }
        metrics.expired(expired.len());
    }
}

/// How often node locks are checked for ones nobody will take over.
const LOCK_SWEEP_INTERVAL: Duration = Duration::from_secs(3);

/// What the stale-lock sweep needs.
#[derive(Clone)]
pub struct LockSweep {
    pub client: Client,
    /// The watch-fed state, which keeps each node's lock value: the sweep reads which
    /// nodes are locked there instead of listing every node each round.
    pub state: Arc<Mutex<SchedState>>,
    pub binds: Arc<LocalBinds>,
    pub leadership: Leadership,
    pub lock_timeout: Duration,
}

impl std::fmt::Debug for LockSweep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockSweep")
            .field("lock_timeout", &self.lock_timeout)
            .finish_non_exhaustive()
    }
}

impl LockSweep {
    /// Releases, every few seconds while leading, the node locks a bind would take over
    /// (`lock::release_stale`): a lock whose owner was deleted, or re-created under its
    /// name, after its bind and before its allocation is otherwise left until the next
    /// bind to that node (`docs/extender.md#node-lock-takeover`).
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), std::convert::Infallible> {
        let mut tick = tokio::time::interval(LOCK_SWEEP_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                _ = tick.tick() => {}
            }
            if self.leadership.is_leader() {
                self.round().await;
            }
        }
    }

    async fn round(&self) {
        // A LIST of every node every few seconds would load the API server and this
        // process with thousands of node objects (their register annotations included) on
        // large clusters; the node watch already shows which nodes carry a lock, and
        // `release_stale` reads each of those afresh before it judges.
        let locked: Vec<String> = self
            .state
            .lock_unpoisoned()
            .nodes()
            .filter(|(_, entry)| entry.lock.is_some())
            .map(|(name, _)| name.clone())
            .collect();
        for node in &locked {
            if let Err(e) =
                lock::release_stale(&self.client, node, self.lock_timeout, &self.binds).await
            {
                tracing::warn!(%node, error = %e, "lock sweep: cannot judge the node lock; next round retries");
            }
        }
    }
}
