//! The check a TLS server runs beside itself: is the certificate it serves still valid?
//! The server's resolver (`tls`) re-reads the pair when its files change and keeps the
//! previous pair when a new one does not load; this check follows the same rule on a
//! timer and turns readiness not ready, with the reason, while the pair in use is
//! expired (or not valid yet): kube-apiserver then refuses every handshake, and an
//! endpoint that looks ready would lie. Valid files make it ready again.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use rustls::sign::CertifiedKey;
use tokio_util::sync::CancellationToken;

use crate::admin::Readiness;
use crate::tls::{load_pair, provider};

/// The readiness component this check reports under.
pub const COMPONENT: &str = "tls certificate";

/// When a certificate is valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    pub not_before: SystemTime,
    pub not_after: SystemTime,
}

impl Validity {
    /// The validity of `key`'s leaf certificate (the first of its chain).
    pub fn of(key: &CertifiedKey) -> Result<Validity, String> {
        let leaf = key
            .cert
            .first()
            .ok_or_else(|| "the chain holds no certificate".to_string())?;
        let (_, parsed) = x509_parser::parse_x509_certificate(leaf.as_ref())
            .map_err(|e| format!("the leaf certificate does not parse: {e}"))?;
        let at = |t: &x509_parser::time::ASN1Time| {
            let secs = t.timestamp();
            match u64::try_from(secs) {
                Ok(s) => SystemTime::UNIX_EPOCH + Duration::from_secs(s),
                Err(_) => SystemTime::UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs()),
            }
        };
        let v = parsed.validity();
        Ok(Validity {
            not_before: at(&v.not_before),
            not_after: at(&v.not_after),
        })
    }

    /// `Err` with the reason when the certificate is not valid at `now`.
    pub fn judge(&self, now: SystemTime, cert: &str) -> Result<(), String> {
        let show = |t: SystemTime| {
            chrono::DateTime::<chrono::Utc>::from(t)
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        };
        if now > self.not_after {
            Err(format!(
                "the certificate served from {cert} expired at {}; install a valid one there",
                show(self.not_after)
            ))
        } else if now < self.not_before {
            Err(format!(
                "the certificate served from {cert} is not valid before {}",
                show(self.not_before)
            ))
        } else {
            Ok(())
        }
    }
}

/// Checks the pair in `cert` and `key` every `every` until `stop`, reporting on
/// `readiness` (component [`COMPONENT`]) whether the certificate in use is valid. A pair
/// that does not load leaves the previous one in use, as the server's resolver does.
pub async fn watch_certificate(
    cert: PathBuf,
    key: PathBuf,
    readiness: Readiness,
    every: Duration,
    stop: CancellationToken,
) -> Result<(), std::convert::Infallible> {
    let provider = provider();
    let shown = cert.display().to_string();
    let mut in_use: Option<Validity> = None;
    let mut last_error: Option<String> = None;
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return Ok(()),
            _ = tick.tick() => {}
        }
        let loaded = load_pair(&cert, &key, &provider)
            .map_err(|e| e.to_string())
            .and_then(|k| Validity::of(&k));
        match loaded {
            Ok(v) => {
                in_use = Some(v);
                last_error = None;
            }
            Err(e) => {
                if last_error.as_ref() != Some(&e) {
                    tracing::warn!(cert = %shown, error = %e, "certificate files not usable; the previous pair stays in use");
                }
                last_error = Some(e);
            }
        }
        if let Some(v) = in_use {
            readiness.set_component(COMPONENT, v.judge(SystemTime::now(), &shown));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn judged_against_both_ends() {
        let t = |s: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        let v = Validity {
            not_before: t(1_000),
            not_after: t(2_000),
        };
        assert_eq!(v.judge(t(1_500), "tls.crt"), Ok(()));
        let late = v.judge(t(2_001), "tls.crt").unwrap_err();
        assert!(
            late.contains("tls.crt expired at 1970-01-01T00:33:20Z"),
            "{late}"
        );
        let early = v.judge(t(999), "tls.crt").unwrap_err();
        assert!(early.contains("not valid before"), "{early}");
    }
}
