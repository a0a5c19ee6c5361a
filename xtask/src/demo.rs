//! `cargo xtask demo`: the built-in demo cluster (see `hami-e2e`) with the example pods,
//! as a readable report or one JSON document.

use std::fmt::Write;
use std::time::Instant;

use anyhow::Context;
use hami_e2e::quota::{self, QuotaOutcome};
use hami_e2e::scenario::{self, Example, RunOutcome};
use hami_e2e::spec::NodeVendor;
use hami_e2e::vendor_examples::{self, VendorOutcome};
use hami_e2e::{ClusterSpec, DemoCluster};
use serde_json::{Value, json};

/// Runs the demo; `Ok(true)` when every example behaved as it must. With `ui`, the
/// cluster keeps running after the report, its dashboard open, until Ctrl-C.
pub async fn run(as_json: bool, ui: bool) -> anyhow::Result<bool> {
    let started = Instant::now();
    let spec = ClusterSpec::demo_all_vendors();
    let cluster = DemoCluster::start(spec.clone())
        .await
        .context("starting the demo cluster")?;
    let ready = started.elapsed();
    let examples = scenario::demo_examples();
    let outcome = scenario::run(&cluster, &examples).await;
    let vendors = vendor_examples::run(&cluster, &vendor_examples::vendor_examples()).await;
    let quota = quota::run(&cluster).await;
    let api = cluster.api().url();
    let extender = cluster.extender_addr();
    let mut ok = outcome.ok() && vendors.ok() && quota.ok();
    let mut problems: Vec<String> = outcome
        .problems
        .iter()
        .map(|(pod, p)| format!("{pod}: {p}"))
        .chain(
            vendors
                .problems
                .iter()
                .map(|(pod, p)| format!("{pod}: {p}")),
        )
        .chain(quota.problems.iter().map(|p| format!("resourcequota: {p}")))
        .collect();
    // With the UI the cluster stays up after the report; otherwise its shutdown is part
    // of what the report checks.
    let kept = if ui {
        Some(cluster)
    } else {
        if let Err(e) = cluster.shutdown().await {
            ok = false;
            problems.push(format!("shutdown: {e}"));
        }
        None
    };
    let elapsed = started.elapsed();
    if as_json {
        let mut doc = json_document(&spec, &examples, &outcome, &quota, &problems, ok, elapsed);
        doc["vendor_pods"] = serde_json::to_value(&vendors.pods)?;
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print!(
            "{}",
            text(
                &spec, &examples, &outcome, &vendors, &quota, &problems, ok, &api, extender, ready,
                elapsed
            )
        );
    }
    if let Some(cluster) = kept {
        keep_running(&cluster).await?;
        if let Err(e) = cluster.shutdown().await {
            eprintln!("demo cluster shutdown: {e}");
            ok = false;
        }
    }
    Ok(ok)
}

fn json_document(
    spec: &ClusterSpec,
    examples: &[Example],
    outcome: &RunOutcome,
    quota: &QuotaOutcome,
    problems: &[String],
    ok: bool,
    elapsed: std::time::Duration,
) -> Value {
    let pods: Vec<Value> = outcome
        .report
        .pods
        .iter()
        .map(|p| {
            let ex = examples.iter().find(|e| e.name() == p.name);
            let containers: Vec<Value> = p
                .containers
                .iter()
                .map(|c| {
                    json!({
                        "name": c.name,
                        "limits": c.limits,
                        "devices": c.devices,
                        "kubelet_devices": c.kubelet_devices,
                        "env": c.env,
                        "mounts": c.mounts,
                    })
                })
                .collect();
            json!({
                "name": p.name,
                "namespace": p.namespace,
                "node": p.node,
                "phase": p.phase,
                "reason": p.reason,
                "message": p.message,
                "expected": ex.map(scenario::expected_state),
                "about": ex.map(|e| e.about),
                "annotations": p.annotations,
                "labels": p.labels,
                "containers": containers,
                "warnings": p.warnings,
            })
        })
        .collect();
    let nodes: Vec<Value> = spec
        .nodes
        .iter()
        .map(|n| {
            json!({
                "name": n.name,
                "vendor": format!("{:?}", n.vendor),
                "devices": n.device_ids(),
                "gpus": n.gpus.iter().enumerate().map(|(i, g)| json!({
                    "uuid": n.uuid(i), "model": g.model, "memory_mib": g.memory_mib, "numa": g.numa,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "ok": ok,
        "elapsed_ms": elapsed.as_millis() as u64,
        "nodes": nodes,
        "pods": pods,
        "gpus": outcome.report.gpus,
        "usage": outcome.usage,
        "resource_quota": quota,
        "violations": outcome.report.violations,
        "problems": problems,
    })
}

#[allow(clippy::too_many_arguments)]
fn text(
    spec: &ClusterSpec,
    examples: &[Example],
    outcome: &RunOutcome,
    vendors: &VendorOutcome,
    quota: &QuotaOutcome,
    problems: &[String],
    ok: bool,
    api: &str,
    extender: std::net::SocketAddr,
    ready: std::time::Duration,
    elapsed: std::time::Duration,
) -> String {
    let mut out = String::new();
    let split = spec.devices.nvidia.device_split_count;
    let _ = writeln!(
        out,
        "hami-rs demo: an emulated cluster running the real hami-webhook, hami-scheduler and hami-device-plugin-nvidia, -amd and -dcu\n"
    );
    let _ = writeln!(
        out,
        "  API server emulator   {api} (admission calls hami-webhook over HTTPS via its MutatingWebhookConfiguration)"
    );
    let _ = writeln!(
        out,
        "  kube-scheduler        emulator, profile {:?}, extender http://{extender} (filter, bind, nodeCacheCapable)",
        spec.scheduler_name
    );
    let _ = writeln!(
        out,
        "  nodes                 kubelet emulator + hami-device-plugin-nvidia (fake GPUs, split {split}) + node agent + fake workload + hami-vgpu-monitor each"
    );
    let _ = writeln!(
        out,
        "                        AMD and DCU nodes: kubelet emulator + hami-device-plugin-amd / -dcu on a fake sysfs/dev tree + node agent"
    );
    let _ = writeln!(out, "  ready in              {:.1}s\n", ready.as_secs_f64());
    let _ = writeln!(out, "Nodes");
    for n in &spec.nodes {
        let mut models: Vec<(String, u64)> = Vec::new();
        for g in &n.gpus {
            if !models
                .iter()
                .any(|(m, mem)| *m == g.model && *mem == g.memory_mib)
            {
                models.push((g.model.clone(), g.memory_mib));
            }
        }
        let what: Vec<String> = models
            .iter()
            .map(|(m, mem)| {
                let count = n
                    .gpus
                    .iter()
                    .filter(|g| g.model == *m && g.memory_mib == *mem)
                    .count();
                format!("{count} x {m} ({mem} MiB)")
            })
            .collect();
        match n.vendor {
            NodeVendor::Amd { gpus } => {
                let _ = writeln!(
                    out,
                    "  {:<10} {gpus} x AMD Instinct MI300X (fake tree)",
                    n.name
                );
                continue;
            }
            NodeVendor::Dcu { cards } => {
                let _ = writeln!(out, "  {:<10} {cards} x Hygon K100_AI (fake tree)", n.name);
                continue;
            }
            NodeVendor::Nvidia => {}
        }
        let numa: Vec<String> = n.gpus.iter().map(|g| g.numa.to_string()).collect();
        let _ = writeln!(
            out,
            "  {:<10} {}, NUMA {}",
            n.name,
            what.join(", "),
            numa.join("/")
        );
    }
    let _ = writeln!(
        out,
        "\nExample pods, submitted one at a time through the API (webhook -> scheduler -> extender -> kubelet -> Allocate)"
    );
    for (i, e) in examples.iter().enumerate() {
        let _ = writeln!(
            out,
            "  {:>2}. {:<15} {} (expected: {})",
            i + 1,
            e.name(),
            e.about,
            scenario::expected_state(e)
        );
    }
    for (i, e) in vendor_examples::vendor_examples().iter().enumerate() {
        let _ = writeln!(
            out,
            "  {:>2}. {:<15} {} (expected: Running)",
            examples.len() + i + 1,
            e.pod.name,
            e.about
        );
    }
    let _ = writeln!(out);
    out.push_str(&outcome.report.render_text());
    out.push_str(&outcome.usage.render_text());
    out.push_str(&vendors.render_text());
    out.push_str(&quota.render_text());
    let running = outcome
        .report
        .pods
        .iter()
        .filter(|p| p.phase == "Running")
        .count();
    let pending = outcome.report.pods.len() - running;
    if ok {
        let _ = writeln!(
            out,
            "\nOK: all {} example pods behaved as expected ({running} running, {pending} pending as intended), the {} AMD and DCU pods got exactly what their annotations imply, and the namespace quota refused what it must; {:.1}s in all.",
            examples.len(),
            vendors.pods.len(),
            elapsed.as_secs_f64()
        );
    } else {
        let _ = writeln!(out, "\nFAILED: the demo did not behave as expected:");
        for p in problems {
            let _ = writeln!(out, "  - {p}");
        }
        for v in &outcome.report.violations {
            let _ = writeln!(out, "  - {v}");
        }
    }
    out
}

/// Prints where the dashboard is and waits for Ctrl-C.
async fn keep_running(cluster: &DemoCluster) -> anyhow::Result<()> {
    let admin = cluster
        .extender_admin()
        .context("the extender is not running")?;
    let kubeconfig = cluster.work_dir().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        hami_testkit::emulator::kubeconfig(&cluster.api().url()),
    )
    .with_context(|| format!("writing {}", kubeconfig.display()))?;
    let k = kubeconfig.display();
    eprintln!(
        "\nThe demo cluster keeps running (Ctrl-C stops it).\n\
         \n  dashboard   http://{admin}/ui\
         \n  its API     http://{admin}/api/v1/cluster\
         \n  hamictl     cargo run -p hamictl -- top gpus --kubeconfig {k}\
         \n              cargo run -p hamictl -- explain pod too-big --kubeconfig {k}\
         \n  kubectl     kubectl --kubeconfig {k} get pods -o wide\n"
    );
    hami_server::shutdown::shutdown_on_signals()
        .cancelled()
        .await;
    Ok(())
}
