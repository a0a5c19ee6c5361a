//! The demo's ResourceQuota part: a namespace limited to [`LIMIT_MIB`] MiB of GPU memory
//! (`limits.nvidia.com/gpumem`); a pod that alone asks for more is refused at admission
//! by the webhook, and of several pods that only together exceed the limit the last is
//! refused at filter by the extender (`docs/protocol.md#resourcequota`).

use std::fmt::Write as _;
use std::time::Duration;

use hami_testkit::fixture::{GpuPod, poll_until};
use k8s_openapi::api::core::v1::{Namespace, ResourceQuota};
use kube::api::{Api, PostParams};
use serde::Serialize;
use serde_json::json;

use crate::cluster::{DemoCluster, Settled};
use crate::scenario::SETTLE_TIMEOUT;

pub const NAMESPACE: &str = "quota-demo";
pub const QUOTA: &str = "gpu-memory";
pub const RESOURCE: &str = "limits.nvidia.com/gpumem";
pub const LIMIT_MIB: u32 = 8000;
/// Asks for more than the whole limit: refused at admission.
pub const TOO_BIG: (&str, u32) = ("quota-too-big", 10_000);
/// Fit one after the other until the limit is reached: the last is refused at filter.
pub const TOGETHER: [(&str, u32); 3] = [("quota-a", 3000), ("quota-b", 3000), ("quota-c", 3000)];

/// What the quota part showed.
#[derive(Debug, Clone, Default, Serialize)]
pub struct QuotaOutcome {
    /// The webhook's refusal of the pod that alone exceeds the limit.
    pub admission_refusal: Option<String>,
    /// `(pod, node)` of the pods within the limit.
    pub placed: Vec<(String, String)>,
    /// `(pod, kube-scheduler's message)` of the pods refused at filter.
    pub refused: Vec<(String, String)>,
    /// The namespace's use as the extender exports it (`hami_resource_quota_used`).
    pub used_mib: Option<u64>,
    /// What did not go as it must.
    pub problems: Vec<String>,
}

/// Creates the namespace and its quota, waits until the webhook and the extender know
/// the limit, then submits the pods and checks what happened to each.
pub async fn run(cluster: &DemoCluster) -> QuotaOutcome {
    let mut out = QuotaOutcome::default();
    if let Err(e) = create_quota(cluster).await {
        out.problems.push(format!("creating the quota: {e}"));
        return out;
    }
    let (name, mib) = TOO_BIG;
    match cluster.create_pod(&pod(name, mib)).await {
        Ok(_) => out.problems.push(format!(
            "{name} ({mib} MiB > {LIMIT_MIB}) was admitted; the webhook must refuse it"
        )),
        Err(e) => {
            let message = match e {
                kube::Error::Api(status) => status.message,
                other => other.to_string(),
            };
            if !message.contains("exceeding resource quota") || !message.contains(&mib.to_string())
            {
                out.problems.push(format!(
                    "{name}: refused with {message:?}, not the quota refusal with the numbers"
                ));
            }
            out.admission_refusal = Some(message);
        }
    }
    let mut total = 0;
    for (name, mib) in TOGETHER {
        total += mib;
        let fits = total <= LIMIT_MIB;
        if let Err(e) = cluster.create_pod(&pod(name, mib)).await {
            out.problems.push(format!("{name}: creation refused: {e}"));
            continue;
        }
        match cluster.wait_settled(NAMESPACE, name, SETTLE_TIMEOUT).await {
            Ok(Settled::Running { node }) if fits => out.placed.push((name.into(), node)),
            Ok(Settled::Unschedulable { message, .. })
                if !fits && message.contains("ResourceQuotaNotFit") =>
            {
                out.refused.push((name.into(), message));
            }
            Ok(other) => out.problems.push(format!(
                "{name} ({total} MiB in the namespace with it, limit {LIMIT_MIB}): {other:?}"
            )),
            Err(e) => out.problems.push(format!("{name}: {e}")),
        }
    }
    let used = placed_mib(&out);
    out.used_mib = quota_used(cluster).await;
    if out.used_mib != Some(used) {
        out.problems.push(format!(
            "hami_resource_quota_used shows {:?} MiB, the placed pods hold {used}",
            out.used_mib
        ));
    }
    out
}

fn pod(name: &str, mib: u32) -> GpuPod {
    GpuPod::new(name).namespace(NAMESPACE).gpus(1).gpumem(mib)
}

fn placed_mib(out: &QuotaOutcome) -> u64 {
    out.placed
        .iter()
        .filter_map(|(p, _)| TOGETHER.iter().find(|(n, _)| n == p))
        .map(|(_, mib)| u64::from(*mib))
        .sum()
}

async fn create_quota(cluster: &DemoCluster) -> Result<(), String> {
    let client = cluster.client();
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))
        .map_err(|e| e.to_string())?;
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(e.to_string()),
    }
    let quota: ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": QUOTA, "namespace": NAMESPACE},
        "spec": {"hard": {RESOURCE: LIMIT_MIB.to_string()}},
    }))
    .map_err(|e| e.to_string())?;
    Api::<ResourceQuota>::namespaced(client, NAMESPACE)
        .create(&PostParams::default(), &quota)
        .await
        .map_err(|e| e.to_string())?;
    // Both watch the API server: wait until each has the limit.
    let limit_line = format!(
        "hami_resource_quota_limit{{zone=\"vGPU\",namespace=\"{NAMESPACE}\",quota_name=\"nvidia.com/gpumem\"}} {LIMIT_MIB}"
    );
    poll_until(
        "the extender to know the quota",
        Duration::from_secs(10),
        || async {
            let m = cluster.extender_metrics().await.ok()?;
            m.contains(&limit_line).then_some(())
        },
    )
    .await
    .map_err(|e| e.to_string())?;
    poll_until(
        "the webhook to know the quota",
        Duration::from_secs(10),
        || async {
            let m = cluster.webhook_metrics().await.ok()?;
            let known = m
                .lines()
                .find_map(|l| l.strip_prefix("hami_webhook_resource_quota_limits "))?
                .trim()
                .parse::<u64>()
                .ok()?;
            (m.contains("hami_webhook_resource_quotas_synced 1") && known >= 1).then_some(())
        },
    )
    .await
    .map_err(|e| e.to_string())
}

/// The namespace's memory use as the extender exports it.
async fn quota_used(cluster: &DemoCluster) -> Option<u64> {
    let prefix = format!(
        "hami_resource_quota_used{{zone=\"vGPU\",namespace=\"{NAMESPACE}\",quota_name=\"nvidia.com/gpumem\",limit=\"{LIMIT_MIB}\"}} "
    );
    let m = cluster.extender_metrics().await.ok()?;
    m.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
}

impl QuotaOutcome {
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }

    /// The demo report's quota section.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "\nResourceQuota: namespace {NAMESPACE}, {RESOURCE}: {LIMIT_MIB} (MiB of GPU memory)"
        );
        let (name, mib) = TOO_BIG;
        let _ = writeln!(
            out,
            "  {name:<14} {mib:>6} MiB  refused at admission: {}",
            self.admission_refusal.as_deref().unwrap_or("(admitted!)")
        );
        for (name, mib) in TOGETHER {
            let placed = self.placed.iter().find(|(p, _)| p == name);
            let refused = self.refused.iter().find(|(p, _)| p == name);
            let what = match (placed, refused) {
                (Some((_, node)), _) => format!("running on {node}"),
                (_, Some((_, message))) => format!("refused at filter: {message}"),
                _ => "did not settle as it must".into(),
            };
            let _ = writeln!(out, "  {name:<14} {mib:>6} MiB  {what}");
        }
        let _ = writeln!(
            out,
            "  namespace use (hami_resource_quota_used): {} MiB of {LIMIT_MIB}",
            self.used_mib
                .map_or_else(|| "unknown".into(), |u| u.to_string())
        );
        out
    }
}
