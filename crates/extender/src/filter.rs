//! POST /filter: choose the node and devices, reserve them, and have the pod annotated.
//!
//! The decision and the reservation happen under the state lock, so concurrent filters
//! never hand out the same capacity twice. The annotation write (with the bind mark,
//! [`crate::bind_mark`]) happens after the answer, off kube-scheduler's critical path:
//! /bind for the pod waits for it before the pod is bound (the device plugin reads the
//! annotations only after binding), and a failed write abandons the reservation so /bind
//! fails and kube-scheduler retries.
//!
//! One call, step by step: [`FilterPod::of`] and [`Extender::plan`] read the request,
//! [`candidates`] lists the nodes, [`Extender::place_and_reserve`] decides and reserves
//! under the lock, [`placed_answer`] or [`Extender::refuse`] answers, and
//! [`Extender::write_annotations`] hands the pod's writes to the background.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::Instant;

use hami_core::annotations as keys;
use hami_core::engine::{PodPlan, allocation_annotations, place_reporting};
use hami_core::fit::FitFailure;
use hami_core::sync::MutexExt;
use hami_k8s::events::{EventType, Subject};
use hami_k8s::patch::{MetadataPatch, PodRef, is_gone, patch_pod};
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;
use tokio::sync::watch;
use tracing::Instrument;

use crate::bind_mark;
use crate::filter_report::{
    EVENT_NODES, NodeFailure, failed_nodes, failure_summary, success_message,
};
use crate::metrics::{ErrorReason, FilterOutcome, Operation};
use crate::service::{Extender, Failure, WriteState, fail, unix_now};
use crate::state::{Reservation, SchedState};
use crate::unschedulable::Refusal;
use crate::wire::{ExtenderArgs, ExtenderFilterResult, NodeList};

/// The pod of a /filter call, as the request names it.
#[derive(Debug, Clone)]
struct FilterPod {
    namespace: String,
    name: String,
    uid: String,
}

impl FilterPod {
    fn of(pod: &Pod) -> Self {
        FilterPod {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
        }
    }

    /// `namespace/name`, for messages.
    fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    fn subject(&self) -> Subject {
        Subject::pod(&self.namespace, &self.name, Some(&self.uid))
    }
}

/// What the lock-held step decided.
enum Decision {
    Placed(Placed),
    /// No candidate fits: why, per node.
    NoFit(BTreeMap<String, NodeFailure>),
}

/// A node chosen and reserved, with what is written into the pod after the answer.
struct Placed {
    node: String,
    annotations: BTreeMap<String, String>,
    /// The FilteringSucceed text.
    event: String,
    fits: usize,
    not_fit: usize,
}

/// Candidates' outcomes as the engine reports them: a placed pod's event counts the
/// fitting nodes and names a few, and misfits are kept for the report when none fits.
#[derive(Default)]
struct Tally<'a> {
    fits: usize,
    shown: Vec<(&'a str, f32)>,
    /// `None`: the ledger does not know the node.
    misfits: Vec<(&'a str, Option<FitFailure>)>,
}

impl<'a> Tally<'a> {
    fn note(&mut self, node: &'a str, outcome: Result<f32, Option<FitFailure>>) {
        match outcome {
            Ok(score) => {
                self.fits += 1;
                if self.shown.len() < EVENT_NODES {
                    self.shown.push((node, score));
                }
            }
            Err(f) => self.misfits.push((node, f)),
        }
    }

    /// Why each misfit failed; nodes the ledger does not know, and nodes lacking a
    /// vendor the pod asks for, are asked about in `st` (a vendor taken out of
    /// scheduling says why).
    fn failures(self, st: &SchedState, vendors: &[String]) -> BTreeMap<String, NodeFailure> {
        self.misfits
            .into_iter()
            .map(|(node, f)| {
                let failure = match f {
                    Some(FitFailure::InsufficientDevices) => {
                        match st.vendor_unavailable(node, vendors) {
                            Some(why) => NodeFailure::Unusable(why),
                            None => NodeFailure::Fit(FitFailure::InsufficientDevices),
                        }
                    }
                    Some(f) => NodeFailure::Fit(f),
                    None => NodeFailure::Unusable(st.unusable_reason(node)),
                };
                (node.to_string(), failure)
            })
            .collect()
    }
}

impl Extender {
    /// Answers one /filter call (`started`: when the request arrived).
    pub async fn filter(&self, args: ExtenderArgs<'_>, started: Instant) -> ExtenderFilterResult {
        let span = match &args.pod {
            Some(pod) => {
                let meta = &pod.metadata;
                hami_server::pod_span!(
                    "filter",
                    meta.namespace.as_deref().unwrap_or_default(),
                    meta.name.as_deref().unwrap_or_default(),
                    meta.uid.as_deref().unwrap_or_default()
                )
            }
            None => hami_server::pod_span!("filter"),
        };
        let (result, outcome) = match self.filter_steps(args).instrument(span).await {
            Ok(answer) => answer,
            Err(f) => {
                self.metrics.error(Operation::Filter, f.reason);
                (ExtenderFilterResult::error(f.message), FilterOutcome::Error)
            }
        };
        self.metrics.filter_done(outcome, started.elapsed());
        result
    }

    async fn filter_steps(
        &self,
        args: ExtenderArgs<'_>,
    ) -> Result<(ExtenderFilterResult, FilterOutcome), Failure> {
        let Some(pod) = &args.pod else {
            return Err(fail(ErrorReason::NoPod, "extender args carry no Pod"));
        };
        let pod_id = FilterPod::of(pod);
        let mut plan = self.plan(pod, &pod_id)?;
        if plan.is_empty() {
            // Not ours: every candidate passes.
            return Ok((passthrough(args), FilterOutcome::Passthrough));
        }
        if pod_id.uid.is_empty() {
            return Err(fail(
                ErrorReason::NoUid,
                format!("pod {} has no metadata.uid", pod_id.key()),
            ));
        }
        self.wait_synced()
            .await
            .map_err(|e| fail(ErrorReason::NotSynced, e))?;
        let decision = self.place_and_reserve(&mut plan, &pod_id, &candidates(&args), unix_now());
        match decision {
            Decision::Placed(placed) => {
                let node = placed.node.clone();
                let (fits, not_fit) = (placed.fits, placed.not_fit);
                self.write_annotations(&pod_id, placed);
                tracing::info!(
                    pod = %pod_id.key(),
                    %node,
                    fit = fits,
                    not_fit,
                    "filter: placed"
                );
                Ok((placed_answer(args.nodes, node), FilterOutcome::Placed))
            }
            Decision::NoFit(failures) => Ok((
                self.refuse(&pod_id, &failures),
                FilterOutcome::Unschedulable,
            )),
        }
    }

    /// The pod's device requests. A pod that can never be scheduled is told why, in an
    /// event as well as in the answer.
    fn plan(&self, pod: &Pod, pod_id: &FilterPod) -> Result<PodPlan, Failure> {
        PodPlan::new(pod, &self.registry, &self.settings.defaults).map_err(|e| {
            let msg = format!("pod {} cannot be scheduled: {e}", pod_id.key());
            tracing::info!(pod = %pod_id.key(), error = %e, "filter: pod refused");
            self.events.record(
                pod_id.subject(),
                EventType::Warning,
                "FilteringFailed",
                msg.clone(),
            );
            fail(ErrorReason::BadRequest, msg)
        })
    }

    /// Fits the pod on every candidate and reserves the best node's devices, under the
    /// state lock: the namespace's quota budget is read there too, so two filters never
    /// share the last of a quota. The full per-node report is only built when no node
    /// fits.
    fn place_and_reserve(
        &self,
        plan: &mut PodPlan,
        pod_id: &FilterPod,
        candidates: &[&str],
        now: i64,
    ) -> Decision {
        let mut tally = Tally::default();
        let mut st = self.lock_state();
        st.begin_filter(&pod_id.uid, now);
        plan.quota = st.quota_budgets(&self.quotas.read(), &pod_id.namespace, &plan.vendor_keys);
        if plan.frag.is_some() {
            // The workload learnt from this cluster's pods, not the built-in one.
            plan.frag = Some(st.frag_model(now));
            plan.pairing = st.frag_pairing(now);
        }
        let plan = &*plan;
        let chosen = place_reporting(
            plan,
            &self.registry,
            st.ledger(),
            candidates.iter().copied(),
            |node, outcome| tally.note(node, outcome),
        );
        let Some((node, fit)) = chosen else {
            return Decision::NoFit(tally.failures(&st, &plan.vendor_keys));
        };
        let annotations = allocation_annotations(&self.registry, plan, &node, &fit, now);
        let report = st.reserve(&Reservation {
            uid: &pod_id.uid,
            namespace: &pod_id.namespace,
            name: &pod_id.name,
            node: &node,
            devices: &fit.devices,
            kinds: &plan.kinds,
            annotations: &annotations,
            at: now,
        });
        if plan.frag.is_some() {
            st.reserve_resources(&pod_id.uid, &node, plan.resources);
        }
        drop(st);
        if !report.unknown_devices.is_empty() {
            tracing::error!(%node, devices = ?report.unknown_devices, "reserved devices the node does not register");
        }
        let not_fit = tally.misfits.len();
        Decision::Placed(Placed {
            event: success_message(&node, not_fit, tally.fits, &tally.shown),
            fits: tally.fits,
            not_fit,
            node,
            annotations,
        })
    }

    /// The answer when no node fits, with the FilteringFailed event.
    fn refuse(
        &self,
        pod_id: &FilterPod,
        failures: &BTreeMap<String, NodeFailure>,
    ) -> ExtenderFilterResult {
        let summary = failure_summary(failures);
        tracing::info!(pod = %pod_id.key(), reasons = %summary, "filter: no node fits");
        self.lock_state().note_unschedulable(
            &pod_id.uid,
            Refusal {
                namespace: pod_id.namespace.clone(),
                name: pod_id.name.clone(),
                at: unix_now(),
                nodes: failures.len(),
                summary: summary.clone(),
            },
        );
        self.events.record(
            pod_id.subject(),
            EventType::Warning,
            "FilteringFailed",
            summary,
        );
        ExtenderFilterResult {
            failed_nodes: Some(failed_nodes(failures)),
            ..ExtenderFilterResult::default()
        }
    }

    /// Writes the decision into the pod, and records the FilteringSucceed event, in the
    /// background runtime: one hand-over per filter, off kube-scheduler's critical path.
    /// A later write for the same pod waits for the earlier one, so the last decision is
    /// the one that lands. At most [`WRITES_IN_FLIGHT`] writes are sent at once; the
    /// others wait their turn in arrival order, holding only what their patch needs.
    fn write_annotations(&self, pod_id: &FilterPod, placed: Placed) {
        let (tx, rx) = watch::channel(WriteState::Pending);
        let previous = self
            .writes
            .lock_unpoisoned()
            .insert(pod_id.uid.clone(), rx.clone());
        let (client, metrics, state, writes, events, slots) = (
            self.client.clone(),
            self.metrics.clone(),
            self.state.clone(),
            self.writes.clone(),
            self.events.clone(),
            self.write_slots.clone(),
        );
        let pod_id = pod_id.clone();
        let job = async move {
            let Placed {
                node,
                annotations,
                event,
                ..
            } = placed;
            events.record(
                pod_id.subject(),
                EventType::Normal,
                "FilteringSucceed",
                event,
            );
            drop(events);
            if let Some(mut prev) = previous {
                // Ignore the outcome; only the order matters.
                let _ = prev.wait_for(|s| *s != WriteState::Pending).await;
            }
            // The semaphore is never closed: a permit always comes.
            let _slot = slots.acquire_owned().await;
            // Boxed: a write waiting for its slot keeps the small state above, not the
            // request's.
            let outcome = match Box::pin(annotate(&client, &pod_id, node, annotations)).await {
                Ok(()) => WriteState::Written,
                Err(e) => {
                    let reason = if is_gone(&e) {
                        tracing::info!(pod = %pod_id.key(), error = %e, "the pod placed is gone (deleted, or re-created under its name); reservation dropped");
                        ErrorReason::PodGone
                    } else {
                        tracing::warn!(pod = %pod_id.key(), error = %e, "could not annotate the pod with its placement; reservation dropped");
                        ErrorReason::AnnotateFailed
                    };
                    metrics.error(Operation::Filter, reason);
                    state.lock_unpoisoned().abandon(&pod_id.uid, unix_now());
                    WriteState::Failed(e.to_string())
                }
            };
            let written = outcome == WriteState::Written;
            let _ = tx.send(outcome);
            // Forget a finished write unless a newer one replaced it; a failure stays
            // for /bind to report.
            if written {
                let mut writes = writes.lock_unpoisoned();
                if writes.get(&pod_id.uid).is_some_and(|r| r.same_channel(&rx)) {
                    writes.remove(&pod_id.uid);
                }
            }
        }
        // Logged from the background under the pod's /filter span.
        .instrument(tracing::Span::current());
        // Handed to the background runtime by a task of this thread, which runs after the
        // response is on its way: waking another thread is then not on kube-scheduler's
        // clock.
        let background = self.background.clone();
        tokio::spawn(async move {
            background.spawn(job);
        });
    }
}

/// Annotation writes sent to the API server at once. Each runs on a connection of the
/// client's pool, which keeps every connection it opened while it is used: unbounded, a
/// burst of 2,200 filters left 65–320 connections open at 5,000 nodes and 1,912 at 100,
/// about 25 KB of resident memory each (`docs/extender.md#memory`). Twice the event
/// writer's share.
pub(crate) const WRITES_IN_FLIGHT: usize = 16;

/// Writes `node` and `annotations` into the pod with the bind mark, in one patch (so /bind
/// need not write the mark, `bind_mark`). Guarded by the UID: a pod deleted and
/// re-created under the same name since /filter is another pod, and must not carry this
/// decision.
async fn annotate(
    client: &kube::Client,
    pod_id: &FilterPod,
    node: String,
    annotations: BTreeMap<String, String>,
) -> Result<(), kube::Error> {
    let mut patch = MetadataPatch::new().label(keys::VGPU_NODE, node);
    for (k, v) in annotations {
        patch = patch.annotate(&k, v);
    }
    let patch = bind_mark::mark(patch, unix_now());
    let pod = PodRef::new(&pod_id.namespace, &pod_id.name, &pod_id.uid);
    patch_pod(client, pod, &patch).await.map(drop)
}

/// The candidate nodes: `NodeNames`, or the names of `Nodes`.
fn candidates<'a>(args: &'a ExtenderArgs<'_>) -> Vec<&'a str> {
    match (&args.node_names, &args.nodes) {
        (Some(names), _) => names.iter().map(|n| n.as_ref()).collect(),
        (None, Some(list)) => list.names().collect(),
        (None, None) => Vec::new(),
    }
}

/// The answer for a pod that asks for no managed device: every candidate passes.
fn passthrough(args: ExtenderArgs<'_>) -> ExtenderFilterResult {
    ExtenderFilterResult {
        node_names: args
            .node_names
            .map(|n| n.into_iter().map(Cow::into_owned).collect()),
        nodes: args.nodes.map(|l| json!(l)),
        ..ExtenderFilterResult::default()
    }
}

/// The answer naming the chosen node, in the form the candidates came in.
fn placed_answer(nodes: Option<NodeList>, node: String) -> ExtenderFilterResult {
    match nodes {
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
    }
}
