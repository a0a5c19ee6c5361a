//! POST /filter: choose the node and devices, reserve them, and have the pod annotated.
//!
//! The decision and the reservation happen under the state lock, so concurrent filters
//! never hand out the same capacity twice. The annotation write happens after the
//! answer, off kube-scheduler's critical path: /bind for the pod waits for it before
//! the pod is bound (the device plugin reads the annotations only after binding), and a
//! failed write abandons the reservation so /bind fails and kube-scheduler retries.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Instant;

use hami_core::annotations as keys;
use hami_core::engine::{PodPlan, allocation_annotations, place_reporting};
use hami_core::fit::FitFailure;
use hami_core::sync::MutexExt;
use hami_k8s::events::{EventType, Subject};
use hami_k8s::patch::{MetadataPatch, patch_pod};
use serde_json::json;
use tokio::sync::watch;

use crate::service::{Extender, WriteState, unix_now};
use crate::wire::{ExtenderArgs, ExtenderFilterResult};

/// Nodes named in one FilteringSucceed event before the list is cut short.
const EVENT_NODES: usize = 10;

impl Extender {
    /// Answers one /filter call (`started`: when the request arrived).
    pub async fn filter(&self, args: ExtenderArgs<'_>, started: Instant) -> ExtenderFilterResult {
        let (result, outcome) = self.filter_inner(args).await;
        self.metrics.filter_done(outcome, started.elapsed());
        result
    }

    async fn filter_inner(&self, args: ExtenderArgs<'_>) -> (ExtenderFilterResult, &'static str) {
        let Some(pod) = args.pod else {
            self.metrics.error("filter", "no_pod");
            return (
                ExtenderFilterResult::error("extender args carry no Pod"),
                "error",
            );
        };
        let (namespace, name) = (
            pod.metadata.namespace.clone().unwrap_or_default(),
            pod.metadata.name.clone().unwrap_or_default(),
        );
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let listed;
        let candidates: Vec<&str> = match (&args.node_names, &args.nodes) {
            (Some(names), _) => names.iter().map(|n| n.as_ref()).collect(),
            (None, Some(list)) => {
                listed = list.names();
                listed.iter().map(String::as_str).collect()
            }
            (None, None) => Vec::new(),
        };
        let plan = match PodPlan::new(&pod, &self.registry, &self.settings.defaults) {
            Ok(p) => p,
            Err(e) => {
                let msg = format!("pod {namespace}/{name} cannot be scheduled: {e}");
                tracing::info!(pod = %format!("{namespace}/{name}"), error = %e, "filter: pod refused");
                self.events.record(
                    Subject::pod(&namespace, &name, Some(&uid)),
                    EventType::Warning,
                    "FilteringFailed",
                    msg.clone(),
                );
                self.metrics.error("filter", "bad_request");
                return (ExtenderFilterResult::error(msg), "error");
            }
        };
        if plan.is_empty() {
            // Not ours: every candidate passes.
            let result = ExtenderFilterResult {
                node_names: args
                    .node_names
                    .map(|n| n.into_iter().map(|c| c.into_owned()).collect()),
                nodes: args.nodes.map(|l| json!(l)),
                ..ExtenderFilterResult::default()
            };
            return (result, "passthrough");
        }
        if uid.is_empty() {
            self.metrics.error("filter", "no_uid");
            return (
                ExtenderFilterResult::error(format!("pod {namespace}/{name} has no metadata.uid")),
                "error",
            );
        }
        if let Err(e) = self.wait_synced().await {
            self.metrics.error("filter", "not_synced");
            return (ExtenderFilterResult::error(e), "error");
        }

        let now = unix_now();
        // The full per-node report is only built when no node fits; a placed pod's
        // event names a few fitting nodes and counts the rest.
        let mut fits = 0usize;
        let mut shown: Vec<(&str, f32)> = Vec::new();
        let mut misfits: Vec<(&str, Option<FitFailure>)> = Vec::new();
        let decision = {
            let mut st = self.lock_state();
            st.begin_filter(&uid, now);
            let chosen = place_reporting(
                &plan,
                &self.registry,
                st.ledger(),
                candidates.iter().copied(),
                |node, outcome| match outcome {
                    Ok(score) => {
                        fits += 1;
                        if shown.len() < EVENT_NODES {
                            shown.push((node, score));
                        }
                    }
                    Err(f) => misfits.push((node, f)),
                },
            );
            match chosen {
                Some((node, fit)) => {
                    let annotations =
                        allocation_annotations(&self.registry, &plan, &node, &fit, now);
                    let report = st.reserve(
                        &uid,
                        &namespace,
                        &name,
                        &node,
                        &fit.devices,
                        &plan.kinds,
                        &annotations,
                        now,
                    );
                    if !report.unknown_devices.is_empty() {
                        tracing::error!(%node, devices = ?report.unknown_devices, "reserved devices the node does not register");
                    }
                    Ok((node, annotations))
                }
                None => Err(misfits
                    .iter()
                    .map(|(node, f)| {
                        let reason = match f {
                            Some(f) => f.render(),
                            None => st.unusable_reason(node),
                        };
                        (node.to_string(), reason)
                    })
                    .collect::<BTreeMap<String, String>>()),
            }
        };

        let subject = Subject::pod(&namespace, &name, Some(&uid));
        let (node, annotations) = match decision {
            Ok(d) => d,
            Err(failed) => {
                let summary = failure_summary(&failed);
                tracing::info!(pod = %format!("{namespace}/{name}"), reasons = %summary, "filter: no node fits");
                self.events
                    .record(subject, EventType::Warning, "FilteringFailed", summary);
                let result = ExtenderFilterResult {
                    failed_nodes: Some(failed),
                    ..ExtenderFilterResult::default()
                };
                return (result, "unschedulable");
            }
        };

        let event = success_message(&node, misfits.len(), fits, &shown);
        self.write_annotations(&uid, &namespace, &name, &node, annotations, subject, event);
        tracing::info!(
            pod = %format!("{namespace}/{name}"),
            %node,
            fit = fits,
            not_fit = misfits.len(),
            "filter: placed"
        );
        let result = match args.nodes {
            Some(list) => {
                let chosen: Vec<_> = list
                    .items
                    .into_iter()
                    .filter(|n| n.pointer("/metadata/name").and_then(|v| v.as_str()) == Some(&node))
                    .collect();
                ExtenderFilterResult {
                    nodes: Some(json!({"metadata": {}, "items": chosen})),
                    ..ExtenderFilterResult::default()
                }
            }
            None => ExtenderFilterResult {
                node_names: Some(vec![node]),
                ..ExtenderFilterResult::default()
            },
        };
        (result, "placed")
    }

    /// Writes the decision into the pod, and records the FilteringSucceed event, in the
    /// background runtime: one hand-over per filter, off kube-scheduler's critical path.
    /// A later write for the same pod waits for the earlier one, so the last decision is
    /// the one that lands.
    #[allow(clippy::too_many_arguments)]
    fn write_annotations(
        &self,
        uid: &str,
        namespace: &str,
        name: &str,
        node: &str,
        annotations: BTreeMap<String, String>,
        subject: Subject,
        event: String,
    ) {
        let (tx, rx) = watch::channel(WriteState::Pending);
        let previous = self
            .writes
            .lock_unpoisoned()
            .insert(uid.to_string(), rx.clone());
        let node = node.to_string();
        let (client, metrics, state, writes, events) = (
            self.client.clone(),
            self.metrics.clone(),
            self.state.clone(),
            self.writes.clone(),
            self.events.clone(),
        );
        let (uid, namespace, name) = (uid.to_string(), namespace.to_string(), name.to_string());
        let job = async move {
            events.record(subject, EventType::Normal, "FilteringSucceed", event);
            // Built here, off kube-scheduler's critical path.
            let mut patch = MetadataPatch::new().label(keys::VGPU_NODE, node);
            for (k, v) in annotations {
                patch = patch.annotate(&k, v);
            }
            if let Some(mut prev) = previous {
                // Ignore the outcome; only the order matters.
                let _ = prev.wait_for(|s| *s != WriteState::Pending).await;
            }
            let outcome = match patch_pod(&client, &namespace, &name, &patch).await {
                Ok(_) => WriteState::Written,
                Err(e) => {
                    tracing::warn!(pod = %format!("{namespace}/{name}"), error = %e, "could not annotate the pod with its placement; reservation dropped");
                    metrics.error("filter", "annotate_failed");
                    state.lock_unpoisoned().abandon(&uid, unix_now());
                    WriteState::Failed(e.to_string())
                }
            };
            let written = outcome == WriteState::Written;
            let _ = tx.send(outcome);
            // Forget a finished write unless a newer one replaced it; a failure stays
            // for /bind to report.
            if written {
                let mut writes = writes.lock_unpoisoned();
                if writes.get(&uid).is_some_and(|r| r.same_channel(&rx)) {
                    writes.remove(&uid);
                }
            }
        };
        // Handed to the background runtime by a task of this thread, which runs after the
        // response is on its way: waking another thread is then not on kube-scheduler's
        // clock.
        let background = self.background.clone();
        tokio::spawn(async move {
            background.spawn(job);
        });
    }
}

/// HAMi's FilteringSucceed text: `find fit node(<n>), <k> nodes not fit, <m> nodes
/// fit(<n1>:<s1>,...)`, naming the first few fitting candidates.
fn success_message(node: &str, not_fit: usize, fits: usize, shown: &[(&str, f32)]) -> String {
    let mut list = String::new();
    for (i, (n, s)) in shown.iter().enumerate() {
        if i > 0 {
            list.push(',');
        }
        let _ = write!(list, "{n}:{s:.2}");
    }
    if fits > shown.len() {
        list.push_str(",...");
    }
    format!("find fit node({node}), {not_fit} nodes not fit, {fits} nodes fit({list})")
}

/// Groups per-node reasons by reason name: `no available node, 3 nodes do not meet:
/// 2 nodes CardInsufficientMemory(n1,n2); 1 nodes node unregistered(n3)`.
pub fn failure_summary(failed: &BTreeMap<String, String>) -> String {
    let mut by_reason: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for (node, reason) in failed {
        for part in reason.split(", ") {
            // HAMi's per-node entries read `<count>/<devices> <Reason>`.
            let name = match part.split_once(' ') {
                Some((counts, rest)) if counts.contains('/') => rest,
                _ => part,
            };
            by_reason.entry(name.to_string()).or_default().push(node);
        }
    }
    let mut out = format!("no available node, {} nodes do not meet", failed.len());
    for (i, (reason, nodes)) in by_reason.iter().enumerate() {
        out.push_str(if i == 0 { ": " } else { "; " });
        let shown: Vec<&str> = nodes.iter().take(EVENT_NODES).copied().collect();
        let more = if nodes.len() > EVENT_NODES {
            ",..."
        } else {
            ""
        };
        let _ = write!(
            out,
            "{} nodes {reason}({}{more})",
            nodes.len(),
            shown.join(",")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_groups_nodes_by_reason() {
        let failed = BTreeMap::from([
            (
                "n1".to_string(),
                "1/2 CardInsufficientMemory, 1/2 CardNotHealth".to_string(),
            ),
            ("n2".to_string(), "2/2 CardInsufficientMemory".to_string()),
            ("n3".to_string(), "node unregistered".to_string()),
        ]);
        assert_eq!(
            failure_summary(&failed),
            "no available node, 3 nodes do not meet: 2 nodes CardInsufficientMemory(n1,n2); \
             1 nodes CardNotHealth(n1); 1 nodes node unregistered(n3)"
        );
    }

    #[test]
    fn success_message_is_hamis_and_bounded() {
        let names: Vec<String> = (0..10).map(|i| format!("n{i:02}")).collect();
        let shown: Vec<(&str, f32)> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.as_str(), i as f32 / 3.0))
            .collect();
        let msg = success_message("n11", 0, 12, &shown);
        assert!(
            msg.starts_with("find fit node(n11), 0 nodes not fit, 12 nodes fit(n00:0.00,n01:0.33,"),
            "{msg}"
        );
        assert!(msg.ends_with(",...)"), "{msg}");
    }
}
