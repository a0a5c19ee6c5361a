//! Deletion as kube-apiserver does it: graceful for pods bound to a node,
//! held back by `metadata.finalizers`, immediate otherwise.
//!
//! A real cluster's kubelet finishes a graceful pod deletion (it deletes again
//! with grace 0 once the containers stopped); with no kubelet here, the store's
//! reaper does that when the grace period runs out, scaled by [`GraceExpiry`].

use std::time::{Duration, Instant};

use hami_core::pod::is_terminal_phase;
use serde_json::Value;

use super::{Event, EventType, Inner, Key, Preconditions, Store, meta, meta_mut, timestamp_in};
use crate::resources::{self, Resource};
use crate::status::{ApiError, PreconditionField};

/// The pod grace period when neither the pod nor the request sets one.
const DEFAULT_GRACE_SECONDS: i64 = 30;

/// When a pending graceful deletion finishes on its own.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum GraceExpiry {
    /// After the grace period times this factor: 1.0 is real time, 0.0
    /// finishes at once (still announcing the deletionTimestamp first).
    Scaled(f64),
    /// Never: only a second delete with `gracePeriodSeconds: 0` (what the
    /// kubelet sends) removes the pod.
    Never,
}

impl Default for GraceExpiry {
    fn default() -> Self {
        Self::Scaled(1.0)
    }
}

/// The parts of `DeleteOptions` the emulator honours.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    pub preconditions: Preconditions,
    /// Overrides the pod's `spec.terminationGracePeriodSeconds`; 0 = now.
    pub grace_period_seconds: Option<i64>,
}

fn finalizers(obj: &Value) -> bool {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty())
}

fn pending_grace(obj: &Value) -> Option<i64> {
    obj.pointer("/metadata/deletionTimestamp")?;
    Some(
        obj.pointer("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0),
    )
}

/// An object being deleted whose grace is over and whose finalizers are
/// gone must disappear (the registry's `ShouldDeleteDuringUpdate`).
pub(super) fn finished(obj: &Value) -> bool {
    pending_grace(obj) == Some(0) && !finalizers(obj)
}

/// The grace period this delete asks for, as the pod strategy's
/// `CheckGracefulDelete` computes it; 0 for everything but bound, running pods.
fn grace_for(res: &Resource, obj: &Value, requested: Option<i64>) -> i64 {
    if res.id != resources::PODS.id {
        return 0;
    }
    let unbound = obj
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty);
    let done = is_terminal_phase(obj.pointer("/status/phase").and_then(Value::as_str));
    if unbound || done {
        return 0;
    }
    let grace = requested
        .or_else(|| {
            obj.pointer("/spec/terminationGracePeriodSeconds")
                .and_then(Value::as_i64)
        })
        .unwrap_or(DEFAULT_GRACE_SECONDS);
    // As the API server: a negative period means "as short as possible", 1 s.
    if grace < 0 { 1 } else { grace }
}

impl Store {
    /// Sets how pending graceful deletions finish (see [`GraceExpiry`]).
    pub fn set_grace_expiry(&self, expiry: GraceExpiry) {
        self.lock().grace_expiry = expiry;
        self.reaper.notify_one();
    }

    /// Deletes with the default grace period (see [`Store::delete_with`]).
    pub fn delete(
        &self,
        res: &Resource,
        ns: Option<&str>,
        name: &str,
        pre: &Preconditions,
    ) -> Result<Value, ApiError> {
        let opts = DeleteOptions {
            preconditions: pre.clone(),
            grace_period_seconds: None,
        };
        self.delete_with(res, ns, name, &opts)
    }

    /// Deletes like kube-apiserver: a pod bound to a node first gets
    /// `deletionTimestamp` + `deletionGracePeriodSeconds` (a MODIFIED event)
    /// and stays until its grace runs out or a delete with grace 0 comes; an
    /// object with finalizers stays until they are emptied; anything else
    /// goes at once (DELETED). Returns the object as last stored.
    pub fn delete_with(
        &self,
        res: &Resource,
        ns: Option<&str>,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Value, ApiError> {
        let mut g = self.lock();
        let key = (res.id, Self::ns_key(res, ns), name.to_string());
        let cur = g
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(res.plural, name))?;
        let pre = &opts.preconditions;
        for (wanted, field, key) in [
            (&pre.uid, PreconditionField::Uid, "uid"),
            (
                &pre.resource_version,
                PreconditionField::ResourceVersion,
                "resourceVersion",
            ),
        ] {
            let stored = meta(&cur, key).unwrap_or_default();
            if let Some(w) = wanted.as_ref().filter(|w| **w != stored) {
                return Err(ApiError::delete_precondition_failed(
                    res, name, field, w, &stored,
                ));
            }
        }
        let grace = grace_for(res, &cur, opts.grace_period_seconds);
        match pending_grace(&cur) {
            // Already being deleted: only a shorter grace period changes anything.
            Some(pending) if grace >= pending => Ok(cur),
            _ if grace == 0 && !finalizers(&cur) => Ok(self.remove_locked(&mut g, &key)),
            _ => Ok(self.start_graceful(&mut g, &key, cur, grace)),
        }
    }

    /// Marks an object as being deleted, `grace` seconds from now.
    fn start_graceful(&self, g: &mut Inner, key: &Key, mut obj: Value, grace: i64) -> Value {
        let m = meta_mut(&mut obj);
        m.insert("deletionTimestamp".into(), timestamp_in(grace).into());
        m.insert("deletionGracePeriodSeconds".into(), grace.into());
        g.rv += 1;
        m.insert("resourceVersion".into(), g.rv.to_string().into());
        let previous = g.objects.insert(key.clone(), obj.clone());
        let ev = Event {
            rv: g.rv,
            kind: EventType::Modified,
            resource: key.0,
            namespace: key.1.clone(),
            object: obj.clone(),
            previous,
        };
        self.record(g, ev);
        g.deadlines.remove(key);
        if grace > 0 {
            match g.grace_expiry {
                GraceExpiry::Scaled(f) if f.is_finite() && f > 0.0 => {
                    let wait = Duration::from_secs_f64(grace as f64 * f);
                    g.deadlines.insert(key.clone(), Instant::now() + wait);
                    self.reaper.notify_one();
                }
                GraceExpiry::Scaled(_) => return self.expire(g, key).unwrap_or(obj),
                GraceExpiry::Never => {}
            }
        }
        obj
    }

    /// What the kubelet's final delete (grace 0) does once the grace ran out.
    fn expire(&self, g: &mut Inner, key: &Key) -> Option<Value> {
        g.deadlines.remove(key);
        let cur = g.objects.get(key)?.clone();
        if finalizers(&cur) {
            Some(self.start_graceful(g, key, cur, 0))
        } else {
            Some(self.remove_locked(g, key))
        }
    }

    /// Removes an object for good, recording DELETED.
    pub(super) fn remove_locked(&self, g: &mut Inner, key: &Key) -> Value {
        g.deadlines.remove(key);
        let Some(mut obj) = g.objects.remove(key) else {
            return Value::Null;
        };
        g.rv += 1;
        meta_mut(&mut obj).insert("resourceVersion".into(), g.rv.to_string().into());
        let ev = Event {
            rv: g.rv,
            kind: EventType::Deleted,
            resource: key.0,
            namespace: key.1.clone(),
            object: obj.clone(),
            previous: None,
        };
        self.record(g, ev);
        obj
    }

    /// Finishes every graceful deletion whose time is up; returns when the
    /// next one is due.
    pub(crate) fn reap_expired(&self) -> Option<Instant> {
        let mut g = self.lock();
        let now = Instant::now();
        let due: Vec<Key> = g
            .deadlines
            .iter()
            .filter(|(_, t)| **t <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for key in &due {
            self.expire(&mut g, key);
        }
        g.deadlines.values().min().copied()
    }

    /// Runs the grace-period reaper until the task is aborted.
    pub(crate) async fn run_reaper(&self) {
        loop {
            let wake = self.reaper.notified();
            match self.reap_expired() {
                Some(at) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(at.into()) => {}
                        () = wake => {}
                    }
                }
                None => wake.await,
            }
        }
    }
}
