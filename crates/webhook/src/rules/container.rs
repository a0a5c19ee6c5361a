//! What the webhook reads of a container itself (the vendors' edits live in
//! `hami_core::vendor::admission`).

use k8s_openapi::api::core::v1::Container;

/// Whether the container runs privileged.
pub fn is_privileged(c: &Container) -> bool {
    c.security_context
        .as_ref()
        .and_then(|s| s.privileged)
        .unwrap_or(false)
}
