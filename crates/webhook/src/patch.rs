//! The JSON Patch sent back: the difference between the pod as received and as
//! mutated. Both sides go through the same typed Pod, so fields this build does not
//! know are never touched by the patch.

use k8s_openapi::api::core::v1::Pod;

/// The operations that turn `original` into `mutated`.
pub fn pod_patch(original: &Pod, mutated: &Pod) -> Result<json_patch::Patch, serde_json::Error> {
    let from = serde_json::to_value(original)?;
    let to = serde_json::to_value(mutated)?;
    Ok(json_patch::diff(&from, &to))
}
