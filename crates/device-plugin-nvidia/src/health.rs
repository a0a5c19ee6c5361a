//! Which NVML events count against a GPU, and when a GPU's health really changes.
//!
//! Like NVIDIA's and HAMi's plugins, critical Xid events count except the ones applications
//! cause themselves (13, 31, 43, 45, 68, 109); `DP_DISABLE_HEALTHCHECKS` and
//! `DP_ENABLE_HEALTHCHECKS` adjust that list. Double-bit ECC errors count; single-bit ones
//! are corrected by the hardware and do not.
//!
//! Unlike them, one event does not retire a GPU for good: a GPU is *bad* while its NVML probe
//! fails or a counted event happened within the last `window`, and its published health
//! changes only after the bad (or good) state has persisted for `hold`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use hami_device_plugin::health::Persistent;

/// Xids caused by applications, not by the GPU (HAMi's and NVIDIA's default list).
pub const APPLICATION_XIDS: [u64; 6] = [13, 31, 43, 45, 68, 109];

pub const ENV_DISABLE: &str = "DP_DISABLE_HEALTHCHECKS";
pub const ENV_ENABLE: &str = "DP_ENABLE_HEALTHCHECKS";

/// The health check policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthChecks {
    /// `false`: no NVML event checks at all (`DP_DISABLE_HEALTHCHECKS=all` or `xids`).
    pub enabled: bool,
    /// Xids that do not count.
    pub ignored: BTreeSet<u64>,
}

impl Default for HealthChecks {
    fn default() -> Self {
        HealthChecks {
            enabled: true,
            ignored: APPLICATION_XIDS.into_iter().collect(),
        }
    }
}

impl HealthChecks {
    /// From the two environment variables' values: `DP_DISABLE_HEALTHCHECKS` = `all` /
    /// `xids` (no checks) or a comma list of extra Xids to ignore; `DP_ENABLE_HEALTHCHECKS`
    /// = `all` / `xids` (count every Xid) or a comma list of Xids to count after all.
    /// Unreadable items are logged and skipped.
    pub fn from_values(disable: Option<&str>, enable: Option<&str>) -> Self {
        let mut checks = HealthChecks::default();
        let disable = disable.unwrap_or_default().trim().to_ascii_lowercase();
        if disable == "all" || disable.split(',').any(|t| t.trim() == "xids") {
            checks.enabled = false;
            return checks;
        }
        checks.ignored.extend(xid_list(&disable, ENV_DISABLE));
        let enable = enable.unwrap_or_default().trim().to_ascii_lowercase();
        if enable == "all" || enable.split(',').any(|t| t.trim() == "xids") {
            checks.ignored.clear();
        } else {
            for xid in xid_list(&enable, ENV_ENABLE) {
                checks.ignored.remove(&xid);
            }
        }
        checks
    }

    /// From the process environment.
    pub fn from_env() -> Self {
        Self::from_values(
            std::env::var(ENV_DISABLE).ok().as_deref(),
            std::env::var(ENV_ENABLE).ok().as_deref(),
        )
    }

    /// Whether critical Xid `xid` counts against the GPU (an unknown Xid counts).
    pub fn counts(&self, xid: Option<u64>) -> bool {
        self.enabled && xid.is_none_or(|x| !self.ignored.contains(&x))
    }
}

fn xid_list(text: &str, var: &str) -> Vec<u64> {
    text.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .filter_map(|t| match t.parse::<u64>() {
            Ok(x) => Some(x),
            Err(_) => {
                tracing::warn!(variable = var, item = t, "not an Xid number; ignored");
                None
            }
        })
        .collect()
}

/// What NVML said about a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// A counted event (critical Xid, double-bit ECC).
    Critical,
    /// The periodic probe (handle + memory query) succeeded.
    ProbeOk,
    /// The periodic probe failed (e.g. GPU lost).
    ProbeFailed,
}

#[derive(Debug)]
struct GpuState {
    last_critical: Option<Instant>,
    probe_ok: bool,
    health: Persistent,
}

/// Per-GPU health with persistence; pure, driven by the NVML thread.
#[derive(Debug)]
pub struct Monitor {
    gpus: BTreeMap<String, GpuState>,
    window: Duration,
}

impl Monitor {
    pub fn new(uuids: impl IntoIterator<Item = String>, window: Duration, hold: Duration) -> Self {
        let gpus = uuids
            .into_iter()
            .map(|u| {
                (
                    u,
                    GpuState {
                        last_critical: None,
                        probe_ok: true,
                        health: Persistent::new(true, hold),
                    },
                )
            })
            .collect();
        Monitor { gpus, window }
    }

    /// Records a signal; returns the new published health when it flips.
    pub fn signal(&mut self, uuid: &str, signal: Signal, now: Instant) -> Option<bool> {
        let gpu = self.gpus.get_mut(uuid)?;
        match signal {
            Signal::Critical => gpu.last_critical = Some(now),
            Signal::ProbeOk => gpu.probe_ok = true,
            Signal::ProbeFailed => gpu.probe_ok = false,
        }
        Self::evaluate(gpu, self.window, now)
    }

    /// Re-evaluates every GPU at `now` (events age out of the window); returns the flips.
    pub fn tick(&mut self, now: Instant) -> Vec<(String, bool)> {
        let window = self.window;
        self.gpus
            .iter_mut()
            .filter_map(|(uuid, gpu)| Self::evaluate(gpu, window, now).map(|h| (uuid.clone(), h)))
            .collect()
    }

    pub fn uuids(&self) -> impl Iterator<Item = &str> {
        self.gpus.keys().map(String::as_str)
    }

    fn evaluate(gpu: &mut GpuState, window: Duration, now: Instant) -> Option<bool> {
        let recent = gpu
            .last_critical
            .is_some_and(|t| now.saturating_duration_since(t) < window);
        let good = gpu.probe_ok && !recent;
        gpu.health.observe(good, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_values_adjust_the_ignored_list() {
        let d = HealthChecks::from_values(None, None);
        assert!(d.enabled);
        assert!(!d.counts(Some(13)) && !d.counts(Some(109)));
        assert!(d.counts(Some(79)) && d.counts(Some(48)) && d.counts(None));

        assert!(!HealthChecks::from_values(Some("all"), None).enabled);
        assert!(!HealthChecks::from_values(Some("XIDs"), None).counts(Some(79)));
        let extra = HealthChecks::from_values(Some("79, 94,x"), None);
        assert!(
            extra.enabled
                && !extra.counts(Some(79))
                && !extra.counts(Some(94))
                && extra.counts(Some(48))
        );
        let enable = HealthChecks::from_values(None, Some("13,31"));
        assert!(enable.counts(Some(13)) && enable.counts(Some(31)) && !enable.counts(Some(43)));
        let all = HealthChecks::from_values(None, Some("all"));
        assert!(all.counts(Some(13)) && all.counts(Some(109)));
    }

    #[test]
    fn one_event_is_not_forever_and_a_blip_is_nothing() {
        let t0 = Instant::now();
        let s = |ms: u64| t0 + Duration::from_millis(ms);
        let mut m = Monitor::new(
            ["GPU-a".to_string()],
            Duration::from_secs(60),
            Duration::from_secs(10),
        );
        // A failed probe that recovers before `hold`: no change.
        assert_eq!(m.signal("GPU-a", Signal::ProbeFailed, s(0)), None);
        assert_eq!(m.signal("GPU-a", Signal::ProbeOk, s(5_000)), None);
        assert!(m.tick(s(20_000)).is_empty());
        // A critical Xid: bad for the window; unhealthy once it persisted for `hold`.
        assert_eq!(m.signal("GPU-a", Signal::Critical, s(30_000)), None);
        assert!(m.tick(s(35_000)).is_empty());
        assert_eq!(m.tick(s(40_000)), [("GPU-a".to_string(), false)]);
        // Window over at 90 s, healthy again after `hold`.
        assert!(m.tick(s(89_000)).is_empty());
        assert!(m.tick(s(90_000)).is_empty());
        assert_eq!(m.tick(s(100_000)), [("GPU-a".to_string(), true)]);
        assert_eq!(
            m.signal("GPU-x", Signal::Critical, s(0)),
            None,
            "unknown GPU ignored"
        );
    }
}
