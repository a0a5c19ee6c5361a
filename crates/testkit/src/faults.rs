//! Fault injection and the request log: switches tests flip to see how a
//! client copes with a slow or failing API server, and a record to assert on.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use hami_core::sync::MutexExt;

use crate::status::ApiError;

/// What an injected failure looks like to the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// 500, reason `InternalError`.
    InternalError,
    /// 409, reason `Conflict` (as if another writer won the race).
    Conflict,
    /// 504, reason `Timeout`, after waiting this long (the server-side
    /// request timeout); set it above the client's timeout to make it hang.
    Timeout(Duration),
    /// 403, reason `Forbidden` (RBAC refused the request): an error no client retry
    /// fixes, so a watch given it ends instead of retrying.
    Forbidden,
}

/// Something a test runs at an exact point in a client's sequence of calls.
type Hook = Box<dyn FnOnce() + Send>;

/// A hook waiting for its request.
struct PendingHook {
    verb: String,
    path_suffix: String,
    run: Hook,
}

impl std::fmt::Debug for PendingHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingHook")
            .field("verb", &self.verb)
            .field("path_suffix", &self.path_suffix)
            .finish_non_exhaustive()
    }
}

/// One served request, in arrival order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    /// Kubernetes verb: get, list, watch, create, update, patch, delete.
    pub verb: String,
    pub method: String,
    pub path: String,
    pub query: String,
    /// HTTP status answered (200 for watches, which stream).
    pub code: u16,
}

#[derive(Debug, Default)]
struct State {
    latency: Duration,
    /// verb → (failure rate in 0..=1, fault, requests seen)
    errors: HashMap<String, (f64, Fault, u64)>,
    /// (verb, path suffix) → the fault every such request gets.
    path_faults: Vec<(String, String, Fault)>,
    hooks: Vec<PendingHook>,
    log: Vec<RequestRecord>,
}

/// Shared switches; all off by default.
#[derive(Debug, Default)]
pub struct Faults(Mutex<State>);

impl Faults {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.0.lock_unpoisoned()
    }

    /// Delay added before every request is handled.
    pub fn set_latency(&self, latency: Duration) {
        self.lock().latency = latency;
    }

    /// Fails `rate` (0..=1) of the requests with `verb`. Deterministic, so
    /// tests are reproducible: with rate 0.5 every second request fails.
    pub fn set_error_rate(&self, verb: &str, rate: f64, fault: Fault) {
        self.lock()
            .errors
            .insert(verb.to_string(), (rate.clamp(0.0, 1.0), fault, 0));
    }

    /// Fails every request with `verb` whose path ends with `path_suffix` with `fault`
    /// (until [`Faults::clear`]): one object's writes, the others' left alone.
    pub fn fail_path(&self, verb: &str, path_suffix: &str, fault: Fault) {
        self.lock()
            .path_faults
            .push((verb.to_string(), path_suffix.to_string(), fault));
    }

    /// Runs `hook` once, just before the next request with `verb` whose path ends
    /// with `path_suffix` is handled (after any latency): the way to change the
    /// cluster between two calls of a client, e.g. to replace a pod after a component
    /// read it and before it writes it.
    pub fn before_next(&self, verb: &str, path_suffix: &str, hook: impl FnOnce() + Send + 'static) {
        self.lock().hooks.push(PendingHook {
            verb: verb.to_string(),
            path_suffix: path_suffix.to_string(),
            run: Box::new(hook),
        });
    }

    /// Turns all injected failures, latency and pending hooks off.
    pub fn clear(&self) {
        let mut s = self.lock();
        s.latency = Duration::ZERO;
        s.errors.clear();
        s.path_faults.clear();
        s.hooks.clear();
    }

    /// The requests served so far.
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.lock().log.clone()
    }

    pub(crate) fn record(&self, r: RequestRecord) {
        self.lock().log.push(r);
    }

    /// Latency to apply, the failure (if any) and the hook (if one waits for it)
    /// for this request.
    pub(crate) fn decide(&self, verb: &str, path: &str) -> (Duration, Option<Fault>, Option<Hook>) {
        let mut s = self.lock();
        let latency = s.latency;
        let by_rate = s.errors.get_mut(verb).and_then(|(rate, fault, n)| {
            // Fail when the running count of `rate * n` crosses an integer.
            let before = (*rate * *n as f64).floor();
            *n += 1;
            ((*rate * *n as f64).floor() > before).then_some(*fault)
        });
        let fault = s
            .path_faults
            .iter()
            .find(|(v, suffix, _)| v == verb && path.ends_with(suffix.as_str()))
            .map(|(_, _, f)| *f)
            .or(by_rate);
        let hook = s
            .hooks
            .iter()
            .position(|h| h.verb == verb && path.ends_with(&h.path_suffix))
            .map(|i| s.hooks.remove(i).run);
        (latency, fault, hook)
    }
}

/// The Status error for an injected fault.
pub(crate) fn fault_error(f: Fault, verb: &str, path: &str) -> ApiError {
    match f {
        Fault::InternalError => ApiError::InternalError {
            message: format!("injected failure for {verb} {path}"),
        },
        Fault::Conflict => ApiError::Conflict {
            message: format!("injected conflict for {verb} {path}"),
        },
        Fault::Timeout(_) => ApiError::Timeout {
            message: format!(
                "the server was unable to return a response in the time allotted ({verb} {path})"
            ),
        },
        Fault::Forbidden => ApiError::Forbidden {
            message: format!("injected refusal: {verb} {path} is forbidden"),
        },
    }
}
