//! A vendor's own node lock (`docs/vendors.md#node-locks`): Cambricon's
//! `cambricon.com/dsmlu.lock` holds the RFC 3339 time it was taken, no owner; its device
//! plugin removes it after allocating, and a lock older than its expiry (2 minutes) is
//! taken over. Every write carries the node's resourceVersion, like the shared lock's.

use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::Api;

use crate::lock::LockError;
use crate::patch::{MetadataPatch, is_conflict, is_not_found, patch_node};

/// Conflicts (409) are retried at once with a fresh read, this many times.
const CONFLICT_RETRIES: usize = 16;

/// What a time-stamp lock value says at `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stamp {
    /// Absent: free.
    Free,
    /// Taken at this time, still within the expiry.
    Held(DateTime<Utc>),
    /// Taken longer ago than the expiry: may be taken over.
    Expired,
    /// Not an RFC 3339 time. HAMi returns the parse error and the node stays blocked;
    /// here it is taken over like an expired one.
    Malformed(String),
}

/// Judges a lock value at `now`.
pub fn judge(value: Option<&str>, now: DateTime<Utc>, expiry: Duration) -> Stamp {
    let Some(v) = value else {
        return Stamp::Free;
    };
    match DateTime::parse_from_rfc3339(v.trim()) {
        Err(_) => Stamp::Malformed(v.to_string()),
        Ok(t) => {
            let t = t.with_timezone(&Utc);
            let limit = chrono::TimeDelta::from_std(expiry).unwrap_or(chrono::TimeDelta::MAX);
            if now.signed_duration_since(t) > limit {
                Stamp::Expired
            } else {
                Stamp::Held(t)
            }
        }
    }
}

/// Takes the time-stamp lock `key` on `node`, or says who holds it.
pub async fn try_acquire(
    client: &Client,
    node: &str,
    key: &str,
    expiry: Duration,
) -> Result<(), LockError> {
    let api: Api<Node> = Api::all(client.clone());
    for _ in 0..CONFLICT_RETRIES {
        let current = api
            .get_metadata(node)
            .await
            .map_err(|e| api_error(node, e))?;
        let value = current
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .map(String::as_str);
        let now = Utc::now();
        if let Stamp::Held(since) = judge(value, now, expiry) {
            return Err(LockError::Held {
                node: node.to_string(),
                owner: key.to_string(),
                since: since.to_rfc3339(),
                timeout: expiry,
            });
        }
        let mut patch = MetadataPatch::new()
            .annotate(key, now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
        if let Some(rv) = current.metadata.resource_version {
            patch = patch.guarded_by(rv);
        }
        match patch_node(client, node, &patch).await {
            Ok(_) => return Ok(()),
            Err(e) if is_conflict(&e) => continue,
            Err(e) => return Err(api_error(node, e)),
        }
    }
    Err(LockError::Contended {
        node: node.to_string(),
    })
}

/// Removes the time-stamp lock `key` (a bind that failed after taking it).
pub async fn release(client: &Client, node: &str, key: &str) -> Result<(), LockError> {
    let api: Api<Node> = Api::all(client.clone());
    for _ in 0..CONFLICT_RETRIES {
        let current = match api.get_metadata(node).await {
            Ok(c) => c,
            Err(e) if is_not_found(&e) => return Ok(()),
            Err(e) => return Err(api_error(node, e)),
        };
        if !current
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(key))
        {
            return Ok(());
        }
        let mut patch = MetadataPatch::new().remove_annotation(key);
        if let Some(rv) = current.metadata.resource_version {
            patch = patch.guarded_by(rv);
        }
        match patch_node(client, node, &patch).await {
            Ok(_) => return Ok(()),
            Err(e) if is_conflict(&e) => continue,
            Err(e) if is_not_found(&e) => return Ok(()),
            Err(e) => return Err(api_error(node, e)),
        }
    }
    Err(LockError::Contended {
        node: node.to_string(),
    })
}

fn api_error(node: &str, e: kube::Error) -> LockError {
    if is_not_found(&e) {
        LockError::NodeNotFound(node.to_string())
    } else {
        LockError::Api {
            node: node.to_string(),
            source: e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_are_free_held_expired_or_malformed() {
        let now = DateTime::parse_from_rfc3339("2026-08-21T06:22:00Z")
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_default();
        let two_min = Duration::from_secs(120);
        assert_eq!(judge(None, now, two_min), Stamp::Free);
        assert!(matches!(
            judge(Some("2026-08-21T06:21:00Z"), now, two_min),
            Stamp::Held(_)
        ));
        assert!(matches!(
            judge(Some("2026-08-21T14:21:00+08:00"), now, two_min),
            Stamp::Held(_)
        ));
        assert_eq!(
            judge(Some("2026-08-21T06:19:00Z"), now, two_min),
            Stamp::Expired
        );
        assert_eq!(
            judge(Some("test123"), now, two_min),
            Stamp::Malformed("test123".into())
        );
    }
}
