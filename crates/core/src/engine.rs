//! The placement engine: fit a pod on candidate nodes, score, pick one node and its
//! devices, and produce the annotations the scheduler writes (`docs/protocol.md#filter`).

use std::collections::BTreeMap;
use std::hash::Hasher;
use std::sync::{Arc, LazyLock};

use k8s_openapi::api::core::v1::Pod;
use rayon::prelude::*;
use rustc_hash::FxHasher;

use crate::annotations as keys;
use crate::codec::scoring_weights::{ScoringWeights, decode_scoring_weights};
use crate::codec::{CodecError, encode_pod_single_device};
use crate::fit::{
    DeviceWork, FitFailure, FitScratch, FitSettings, Pick, Placed, PodSoFar, container_device,
    enough_devices_pass, fit_container_into,
};
use crate::frag::live::{CachedScore, FragModel, FragNode, NodeFrag, PodFrag, free_share};
use crate::frag::pairing::{Pairing, PairingBonus};
use crate::ledger::{Ledger, NodeInventory, NodeState};
use crate::model::{ContainerDeviceRequest, PodSingleDevice};
use crate::policy::{GpuPolicy, NodePolicy};
use crate::quota::QuotaBudget;
use crate::reason::NODE_UNREGISTERED;
use crate::request::{ContainerKind, PodRequests, RequestError};
use crate::resources::{QuantityError, Resources, pod_requests};
use crate::score::Usage;
use crate::vendor::{AllocationContext, ConstraintError, DeviceConstraints, VendorRegistry};

/// Cluster-wide defaults (scheduler flags).
#[derive(Debug, Clone, Default)]
pub struct SchedulerDefaults {
    pub node_policy: NodePolicy,
    pub gpu_policy: GpuPolicy,
}

/// Why a pod cannot be planned at all (before any node is looked at).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error(transparent)]
    Request(#[from] RequestError),
    #[error(transparent)]
    Constraint(#[from] ConstraintError),
    #[error("pod annotation {key} is invalid: {error}")]
    Weights {
        key: &'static str,
        error: CodecError,
    },
    /// The pod's CPU or memory requests do not parse (read by the `frag` policies only).
    #[error(transparent)]
    Resources(#[from] QuantityError),
}

/// Everything about a pod the engine needs, read once per scheduling attempt.
#[derive(Debug, Clone)]
pub struct PodPlan {
    pub requests: PodRequests,
    pub kinds: Vec<ContainerKind>,
    pub node_policy: NodePolicy,
    pub gpu_policy: GpuPolicy,
    pub weights: ScoringWeights,
    /// Per vendor key.
    pub constraints: BTreeMap<String, DeviceConstraints>,
    /// Per vendor key: the namespace's ResourceQuota budget; absent = unlimited. Set by
    /// the caller, who knows the namespace's limits and use
    /// (`docs/protocol.md#resourcequota`).
    pub quota: BTreeMap<String, QuotaBudget>,
    /// Vendor keys the pod asks for, sorted.
    pub vendor_keys: Vec<String>,
    /// Typical workload of the `frag` policies; set (to the built-in model) only when
    /// the pod uses one. Replace with [`PodPlan::with_frag_model`].
    pub frag: Option<Arc<FragModel>>,
    /// The `frag` node policy's supply-aware pairing term
    /// (`docs/simulator.md#supply-aware-pairing`), applied after the nodes' cached scores;
    /// `None`: off. Set with [`PodPlan::with_pairing`].
    pub pairing: Option<Arc<Pairing>>,
    /// The pod's CPU and memory requests as kube-scheduler counts them; read (and set)
    /// only when the pod uses a `frag` policy.
    pub resources: Resources,
}

impl PodPlan {
    pub fn new(
        pod: &Pod,
        registry: &VendorRegistry,
        defaults: &SchedulerDefaults,
    ) -> Result<Self, PlanError> {
        let requests = PodRequests::from_pod(pod, registry)?;
        let empty = BTreeMap::new();
        let annotations = pod.metadata.annotations.as_ref().unwrap_or(&empty);
        let node_policy = annotations
            .get(keys::NODE_SCHEDULER_POLICY)
            .map_or(defaults.node_policy, |v| NodePolicy::from_annotation(v));
        let gpu_policy = annotations
            .get(keys::GPU_SCHEDULER_POLICY)
            .filter(|v| !v.trim().is_empty())
            .map_or_else(
                || defaults.gpu_policy.clone(),
                |v| GpuPolicy::parse_lenient(v),
            );
        let weights = match annotations.get(keys::DEVICE_SCORING_WEIGHTS) {
            None => ScoringWeights::default(),
            Some(v) => decode_scoring_weights(v).map_err(|error| PlanError::Weights {
                key: keys::DEVICE_SCORING_WEIGHTS,
                error,
            })?,
        };
        let vendor_keys: Vec<String> = requests.vendors().into_iter().map(String::from).collect();
        let mut constraints = BTreeMap::new();
        for vendor in &vendor_keys {
            if let Some(v) = registry.get(vendor) {
                constraints.insert(vendor.clone(), v.pod_constraints(annotations)?);
            }
        }
        let kinds = requests.containers.iter().map(|c| c.kind).collect();
        let frag = (node_policy == NodePolicy::Frag || gpu_policy.frag).then(FragModel::builtin);
        let resources = match frag {
            Some(_) => pod_requests(pod)?,
            None => Resources::ZERO,
        };
        Ok(PodPlan {
            vendor_keys,
            requests,
            kinds,
            node_policy,
            gpu_policy,
            weights,
            constraints,
            quota: BTreeMap::new(),
            frag,
            pairing: None,
            resources,
        })
    }

    /// Uses `model` (the caller's typical workload) for the `frag` policies.
    pub fn with_frag_model(mut self, model: Arc<FragModel>) -> Self {
        self.frag = Some(model);
        self
    }

    /// Uses `pairing` (the demand seen so far) for node policy `frag`'s pairing term.
    pub fn with_pairing(mut self, pairing: Option<Arc<Pairing>>) -> Self {
        self.pairing = pairing;
        self
    }

    /// True when the pod asks for no managed device: the scheduler passes it through.
    pub fn is_empty(&self) -> bool {
        self.requests.is_empty()
    }

    /// A hash of everything a node's fit and score for this plan depend on (its debug
    /// form: requests, policies, constraints, quota, resources, the `frag` model's id),
    /// so a node's cached `frag` score is reused for the same pod shape only.
    fn shape_key(&self) -> u64 {
        use std::fmt::Write as _;
        struct HashWriter(FxHasher);
        impl std::fmt::Write for HashWriter {
            fn write_str(&mut self, s: &str) -> std::fmt::Result {
                self.0.write(s.as_bytes());
                Ok(())
            }
        }
        let mut w = HashWriter(FxHasher::default());
        let _ = write!(w, "{self:?}");
        w.0.finish()
    }
}

/// A node's score for a pod: what is reported, and what nodes are ranked by (the same
/// number but under node policy `frag`, whose nodes rank by the quantised score).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Scored {
    score: f32,
    rank: f64,
    /// The unrounded change behind `rank` ([`CachedScore::gain`]).
    gain: f64,
    /// What the pairing term prices ([`CachedScore::hole`]).
    hole: Option<(i32, i32)>,
}

impl Scored {
    fn plain(score: f32) -> Self {
        Scored {
            score,
            rank: f64::from(score),
            gain: f64::from(score),
            hole: None,
        }
    }
}

/// A node the pod fits on.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeFit {
    /// Node score before the pod is added.
    pub score: f32,
    /// Per vendor key: devices of every container (init first; empty entries kept).
    pub devices: BTreeMap<String, PodSingleDevice>,
    /// The node's registered devices (what the allocation annotations may need beyond
    /// the device strings).
    pub inventory: Arc<NodeInventory>,
}

/// Buffers reused while one pod is evaluated against many nodes.
#[derive(Debug, Default)]
struct Scratch {
    fit: FitScratch,
    /// Per vendor of the plan: working usage of the current node.
    work: Vec<Vec<Usage>>,
    init_work: Vec<Usage>,
    /// Per vendor of the plan: HAMi's device list order on the current node
    /// ([`crate::policy::DeviceKeys::rank`]).
    ranks: Vec<Vec<u32>>,
    init_ranks: Vec<u32>,
    container_picks: Vec<Pick>,
    /// Per vendor of the plan: its group on the current node.
    groups: Vec<Option<usize>>,
    /// Per vendor of the plan: picks on the current node.
    picks: Vec<Vec<Placed>>,
    best: Vec<Vec<Placed>>,
}

/// Fits every container of the pod on one node, in order; later containers see the
/// devices earlier ones took. Regular init containers are fitted on a copy, since they
/// run before (not beside) the app containers.
pub fn fit_node(
    plan: &PodPlan,
    registry: &VendorRegistry,
    node: &NodeState,
) -> Result<NodeFit, FitFailure> {
    let mut scratch = Scratch::default();
    let steps = compile(plan, registry)?;
    let scored = fit_node_compact(plan, &steps, node, &mut scratch)?;
    Ok(materialize(
        plan,
        registry,
        node,
        &scratch.picks,
        scored.score,
    ))
}

/// One container's request for one vendor, resolved once per placement so the per-node
/// fit does no lookups by name.
#[derive(Debug, Clone, Copy)]
struct Step<'p> {
    container: usize,
    init: bool,
    /// Position of the vendor in `plan.vendor_keys`.
    vi: usize,
    req: &'p ContainerDeviceRequest,
    settings: FitSettings<'p>,
    /// A later app container asks for this vendor too: it sees the device order this
    /// container's sort leaves.
    keep_order: bool,
}

/// Constraints of a vendor the pod sets none for.
static NO_CONSTRAINTS: LazyLock<DeviceConstraints> = LazyLock::new(DeviceConstraints::default);

/// Resolves the plan's requests against the registry; a vendor the registry lacks makes
/// every node fail as HAMi's does (no such devices).
fn compile<'p>(
    plan: &'p PodPlan,
    registry: &'p VendorRegistry,
) -> Result<Vec<Step<'p>>, FitFailure> {
    let mut steps = Vec::new();
    for (ci, container) in plan.requests.containers.iter().enumerate() {
        for (vendor_key, req) in &container.by_vendor {
            let vi = plan
                .vendor_keys
                .iter()
                .position(|k| k == vendor_key)
                .ok_or(FitFailure::InsufficientDevices)?;
            let vendor = registry
                .get(vendor_key)
                .ok_or(FitFailure::InsufficientDevices)?;
            let constraints = plan.constraints.get(vendor_key).unwrap_or(&NO_CONSTRAINTS);
            steps.push(Step {
                container: ci,
                init: container.kind == ContainerKind::Init,
                vi,
                req,
                settings: FitSettings {
                    vendor: vendor.as_ref(),
                    any_type: vendor.accepts_any_type(req, constraints),
                    constraints,
                    policy: &plan.gpu_policy,
                    weights: &plan.weights,
                    quota: plan.quota.get(vendor_key),
                    // Set per node (the score reads the node's CPU and memory).
                    frag: None,
                    custom_capacity: vendor.custom_capacity(),
                    node_check: vendor.checks_node(),
                    vendor_choice: vendor.may_choose_devices(),
                },
                keep_order: false,
            });
        }
    }
    // HAMi sorts one device list in place for every container; regular init containers
    // are fitted on copies, so only app containers (and sidecars) pass an order on.
    for i in 0..steps.len() {
        let vi = steps[i].vi;
        steps[i].keep_order = !steps[i].init && steps[i + 1..].iter().any(|t| t.vi == vi);
    }
    Ok(steps)
}

/// The `frag` view of `node` for the plan's pod, when a `frag` policy is in use.
fn frag_node<'m>(plan: &'m PodPlan, node: &NodeState) -> Option<FragNode<'m>> {
    let model = plan.frag.as_deref()?;
    if plan.node_policy != NodePolicy::Frag && !plan.gpu_policy.frag {
        return None;
    }
    let model_id = node.primary_device_type().map_or(0, |t| model.model_of(t));
    let view = match node.resources().free() {
        Some(free) => NodeFrag {
            model: model_id,
            cpu_free: free.cpu_milli,
            mem_free_mib: free.memory_mib(),
        },
        None => NodeFrag::unconstrained(model_id),
    };
    let pod = PodFrag {
        cpu_milli: plan.resources.cpu_milli,
        mem_mib: plan.resources.memory_mib(),
    };
    let shares: Vec<i32> = node.free_shares().collect();
    let before = node
        .frag_cache()
        .phi(model.id(), || model.node(view, pod, &shares, None).before());
    Some(model.node(view, pod, &shares, Some(before)))
}

/// The fit without building device strings; picks are left in `scratch.picks`.
fn fit_node_compact(
    plan: &PodPlan,
    steps: &[Step<'_>],
    node: &NodeState,
    scratch: &mut Scratch,
) -> Result<Scored, FitFailure> {
    let frag = frag_node(plan, node);
    let device_frag = frag.filter(|_| plan.gpu_policy.frag);
    let vendors = &plan.vendor_keys;
    scratch.work.resize_with(vendors.len(), Vec::new);
    scratch.ranks.resize_with(vendors.len(), Vec::new);
    scratch.picks.resize_with(vendors.len(), Vec::new);
    scratch.groups.clear();
    for (vi, key) in vendors.iter().enumerate() {
        let group = node.group(key);
        scratch.groups.push(group);
        scratch.picks[vi].clear();
        scratch.work[vi].clear();
        scratch.ranks[vi].clear();
        if let Some(g) = group {
            let usage = node.group_usage(g);
            scratch.work[vi].extend_from_slice(usage);
            // Registration order, before the pod's first container is sorted.
            scratch.ranks[vi].extend(0..usage.len() as u32);
        }
    }
    for step in steps {
        let vi = step.vi;
        let set = scratch.groups[vi]
            .and_then(|g| node.device_set(g))
            .ok_or(FitFailure::InsufficientDevices)?;
        let mut settings = step.settings;
        settings.frag = device_frag;
        let pod = PodSoFar {
            container: step.container,
            kinds: &plan.kinds,
            placed: &scratch.picks[vi],
            keep_order: step.keep_order,
        };
        if step.init {
            // Fitted apart: the init container's picks and order do not stay.
            scratch.init_work.clear();
            scratch.init_work.extend_from_slice(&scratch.work[vi]);
            scratch.init_ranks.clear();
            scratch.init_ranks.extend_from_slice(&scratch.ranks[vi]);
            let mut work = DeviceWork {
                usage: &mut scratch.init_work,
                rank: &mut scratch.init_ranks,
            };
            fit_container_into(
                set,
                &mut work,
                step.req,
                settings,
                pod,
                &mut scratch.fit,
                &mut scratch.container_picks,
            )?;
        } else {
            let mut work = DeviceWork {
                usage: &mut scratch.work[vi],
                rank: &mut scratch.ranks[vi],
            };
            fit_container_into(
                set,
                &mut work,
                step.req,
                settings,
                pod,
                &mut scratch.fit,
                &mut scratch.container_picks,
            )?;
        }
        scratch.picks[vi].extend(scratch.container_picks.iter().map(|&pick| Placed {
            container: step.container,
            pick,
        }));
    }
    if let (NodePolicy::Frag, Some(frag)) = (plan.node_policy, frag) {
        let (gain, hole) = frag_gain(&frag, plan, node, &scratch.picks);
        return Ok(Scored {
            score: gain as f32,
            rank: frag.rank(gain),
            gain,
            hole,
        });
    }
    Ok(Scored::plain(node.score()))
}

/// Node score of node policy `frag`: Φ(before) − Φ(after) of the picks, the
/// fragmentation they remove (regular init containers do not stay, so they do not count);
/// and, when the pod takes one device, that device's free share before and after (the
/// pairing term's input).
fn frag_gain(
    frag: &FragNode<'_>,
    plan: &PodPlan,
    node: &NodeState,
    picks: &[Vec<Placed>],
) -> (f64, Option<(i32, i32)>) {
    let mut after = Vec::new();
    let mut changed = Vec::new();
    for (vd, us) in node.groups() {
        let vi = plan.vendor_keys.iter().position(|k| *k == vd.vendor);
        let placed = vi
            .and_then(|vi| picks.get(vi))
            .map_or(&[][..], Vec::as_slice);
        for (i, (d, u)) in vd.devices.iter().zip(us).enumerate() {
            let mut a = *u;
            let mut taken = false;
            for p in placed.iter().filter(|p| p.pick.pos == i) {
                if plan.kinds.get(p.container) != Some(&ContainerKind::Init) {
                    a.add(p.pick.slots, u64::from(p.pick.mem), u64::from(p.pick.cores));
                    taken = true;
                }
            }
            let share = free_share(d, &a);
            if taken {
                changed.push((free_share(d, u), share));
            }
            after.push(share);
        }
    }
    let hole = match changed[..] {
        [one] => Some(one),
        _ => None,
    };
    (frag.gain(&after), hole)
}

/// Builds the wire form of compact picks.
fn materialize(
    plan: &PodPlan,
    registry: &VendorRegistry,
    node: &NodeState,
    picks: &[Vec<Placed>],
    score: f32,
) -> NodeFit {
    let n = plan.requests.containers.len();
    let mut devices = BTreeMap::new();
    for (key, placed) in plan.vendor_keys.iter().zip(picks) {
        let (Some((infos, _)), Some(vendor)) = (node.vendor(key), registry.get(key)) else {
            continue;
        };
        let mut per_container: PodSingleDevice = vec![Vec::new(); n];
        for p in placed {
            if let (Some(slot), Some(req)) = (
                per_container.get_mut(p.container),
                plan.requests.containers[p.container].by_vendor.get(key),
            ) {
                slot.push(container_device(vendor.as_ref(), infos, req, &p.pick));
            }
        }
        devices.insert(key.clone(), per_container);
    }
    NodeFit {
        score,
        devices,
        inventory: node.shared_inventory().clone(),
    }
}

/// The outcome of placing one pod over a set of candidate nodes.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Placement {
    /// The chosen node and its fit, if any node fits.
    pub chosen: Option<(String, NodeFit)>,
    /// Every candidate that does not fit, with HAMi's reason text.
    pub failed: BTreeMap<String, String>,
    /// Score of every candidate that fits.
    pub scores: BTreeMap<String, f32>,
}

/// Places the pod on the best of `candidates` (node names) using the ledger's usage.
/// Unknown candidates fail with `node unregistered`. Deterministic: equal scores go to
/// the node whose name sorts first.
pub fn place(
    plan: &PodPlan,
    registry: &VendorRegistry,
    ledger: &Ledger,
    candidates: &[String],
) -> Placement {
    place_explained(plan, registry, ledger, candidates, |_| {
        NODE_UNREGISTERED.to_string()
    })
}

/// [`place`], with candidates the ledger does not know failing for the reason
/// `unusable(name)` gives: the caller knows why (an unreadable registration, devices
/// taken out of scheduling), as hami-scheduler's FailedNodes and `hamictl explain` say.
pub fn place_explained(
    plan: &PodPlan,
    registry: &VendorRegistry,
    ledger: &Ledger,
    candidates: &[String],
    unusable: impl Fn(&str) -> String,
) -> Placement {
    let mut failed = BTreeMap::new();
    let mut scores = BTreeMap::new();
    let chosen = place_reporting(
        plan,
        registry,
        ledger,
        candidates.iter().map(String::as_str),
        |name, outcome| match outcome {
            Ok(score) => {
                scores.insert(name.to_string(), score);
            }
            Err(None) => {
                failed.insert(name.to_string(), unusable(name));
            }
            Err(Some(f)) => {
                failed.insert(name.to_string(), f.render());
            }
        },
    );
    Placement {
        chosen,
        failed,
        scores,
    }
}

/// [`place`] without the per-node report: only the chosen node and its devices. For
/// callers that place many pods and never show why other nodes lost (simulations).
pub fn place_best<'a>(
    plan: &PodPlan,
    registry: &VendorRegistry,
    ledger: &Ledger,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<(String, NodeFit)> {
    place_reporting(plan, registry, ledger, candidates, |_, _| {})
}

/// [`place_best`] scanning every candidate on the calling thread: for callers that run
/// many placements side by side already (a simulation per thread), where splitting one
/// placement's scan only adds hand-offs. Same result as [`place_best`].
pub fn place_best_serial<'a>(
    plan: &PodPlan,
    registry: &VendorRegistry,
    ledger: &Ledger,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<(String, NodeFit)> {
    place_with(plan, registry, ledger, candidates, |_, _| {}, false)
}

/// Fits the pod on every candidate, reporting each outcome to `report` (`Ok(score)`
/// for a fit, `Err(None)` for a node the ledger does not know, `Err(Some(f))` for a
/// misfit), and returns the best node under the pod's node policy. For callers that
/// want less than [`place`]'s full report (counts, a few scores) without allocating
/// per node; reasons can be rendered later with [`FitFailure::render`].
pub fn place_reporting<'a>(
    plan: &PodPlan,
    registry: &VendorRegistry,
    ledger: &Ledger,
    candidates: impl IntoIterator<Item = &'a str>,
    report: impl FnMut(&'a str, Result<f32, Option<FitFailure>>),
) -> Option<(String, NodeFit)> {
    place_with(plan, registry, ledger, candidates, report, true)
}

fn place_with<'a>(
    plan: &PodPlan,
    registry: &VendorRegistry,
    ledger: &Ledger,
    candidates: impl IntoIterator<Item = &'a str>,
    mut report: impl FnMut(&'a str, Result<f32, Option<FitFailure>>),
    parallel: bool,
) -> Option<(String, NodeFit)> {
    let steps = compile(plan, registry);
    let cache = ScoreCaching::for_plan(plan, ledger);
    let pairing = pairing_bonus(plan, ledger);
    let pairing = pairing.as_ref();
    let names: Vec<&'a str> = candidates.into_iter().collect();
    let threads = if parallel {
        rayon::current_num_threads()
    } else {
        1
    };
    let best = if names.len() < PARALLEL_MIN || threads < 2 {
        scan(plan, &steps, cache, pairing, ledger, &names, &mut report)
    } else {
        // Chunks are scanned in parallel; outcomes are reported in candidate order and
        // the winner is chosen by the same total order, so the result does not depend
        // on the number of threads.
        let chunk = names.len().div_ceil(threads);
        let parts: Vec<(Vec<Outcome>, Option<Best<'_>>)> = names
            .par_chunks(chunk)
            .map(|part| {
                let mut outcomes = Vec::with_capacity(part.len());
                let best = scan(plan, &steps, cache, pairing, ledger, part, &mut |_, o| {
                    outcomes.push(o)
                });
                (outcomes, best)
            })
            .collect();
        let mut best: Option<Best<'_>> = None;
        for ((outcomes, part_best), part) in parts.into_iter().zip(names.chunks(chunk)) {
            for (name, outcome) in part.iter().zip(outcomes) {
                report(name, outcome);
            }
            if let Some(b) = part_best
                && best.as_ref().is_none_or(|cur| {
                    better_node(
                        plan.node_policy,
                        b.scored.rank,
                        b.node.name(),
                        cur.scored.rank,
                        cur.node.name(),
                    )
                })
            {
                best = Some(b);
            }
        }
        best
    };
    let best = best?;
    let picks = match best.picks {
        Some(p) => p,
        // Chosen from a cached score: fit it again for its devices (same node state, same
        // plan, same picks).
        None => {
            let mut scratch = Scratch::default();
            fit_node_compact(plan, steps.as_ref().ok()?, best.node, &mut scratch).ok()?;
            scratch.picks
        }
    };
    Some((
        best.node.name().to_string(),
        materialize(plan, registry, best.node, &picks, best.scored.score),
    ))
}

/// Candidates below which the scan stays on the calling thread.
const PARALLEL_MIN: usize = 512;

/// What a node's fit reports.
type Outcome = Result<f32, Option<FitFailure>>;

/// The best node of a scan and its compact picks (`None`: not chosen yet).
struct Best<'l> {
    node: &'l NodeState,
    scored: Scored,
    picks: Option<Vec<Vec<Placed>>>,
}

/// Whether a placement reads and fills the nodes' `frag` score caches: under node policy
/// `frag`, whose scores cost a fragmentation measure per device, with the plan's shape key.
#[derive(Debug, Clone, Copy)]
struct ScoreCaching {
    key: u64,
    capacity: usize,
}

impl ScoreCaching {
    fn for_plan(plan: &PodPlan, ledger: &Ledger) -> Option<Self> {
        let capacity = ledger.score_cache_capacity();
        (plan.node_policy == NodePolicy::Frag && plan.frag.is_some() && capacity > 0).then(|| {
            ScoreCaching {
                key: plan.shape_key(),
                capacity,
            }
        })
    }
}

/// The pairing term of a placement under node policy `frag`, for the cluster as it is,
/// with the model whose primary term ranks it.
fn pairing_bonus<'p>(plan: &'p PodPlan, ledger: &Ledger) -> Option<(PairingBonus, &'p FragModel)> {
    if plan.node_policy != NodePolicy::Frag {
        return None;
    }
    let model = plan.frag.as_deref()?;
    plan.pairing
        .as_ref()
        .filter(|p| p.weight != 0.0)
        .map(|p| (p.bonus(ledger.free_shares()), model))
}

/// Fits the pod on each of `names` in order, reporting every outcome; the best node.
/// Nodes rank by their (cached) node score plus the cluster-wide pairing term.
fn scan<'a, 'l>(
    plan: &PodPlan,
    steps: &Result<Vec<Step<'_>>, FitFailure>,
    cache: Option<ScoreCaching>,
    pairing: Option<&(PairingBonus, &FragModel)>,
    ledger: &'l Ledger,
    names: &[&'a str],
    report: &mut impl FnMut(&'a str, Outcome),
) -> Option<Best<'l>> {
    let mut scratch = Scratch::default();
    // The best node, and whether its picks are in `scratch.best`.
    let mut best: Option<(&'l NodeState, Scored, bool)> = None;
    let quick = steps.as_ref().ok().and_then(|s| quick_step(plan, s));
    for &name in names {
        let Some(node) = ledger.node(name) else {
            report(name, Err(None));
            continue;
        };
        let cached = cache.and_then(|c| node.frag_cache().score(c.key));
        let fitted = match (steps, quick, cached) {
            (_, _, Some(c)) => Ok((
                Scored {
                    score: c.score,
                    rank: c.rank,
                    gain: c.gain,
                    hole: c.hole,
                },
                false,
            )),
            (Ok(steps), Some(step), None) => {
                match fits_anywhere(node, step, &plan.vendor_keys[step.vi]) {
                    Some(true) => Ok((Scored::plain(node.score()), false)),
                    // Not enough devices: the full fit says why, exactly as always.
                    _ => fit_node_compact(plan, steps, node, &mut scratch).map(|s| (s, true)),
                }
            }
            (Ok(steps), None, None) => {
                fit_node_compact(plan, steps, node, &mut scratch).map(|s| (s, true))
            }
            (Err(f), _, None) => Err(f.clone()),
        };
        match fitted {
            Err(f) => report(name, Err(Some(f))),
            Ok((mut scored, has_picks)) => {
                if let (Some(c), None) = (cache, cached) {
                    node.frag_cache().put(
                        c.key,
                        CachedScore {
                            score: scored.score,
                            rank: scored.rank,
                            gain: scored.gain,
                            hole: scored.hole,
                        },
                        c.capacity,
                    );
                }
                if let (Some((p, model)), Some(hole)) = (pairing, scored.hole) {
                    let primary = |d| model.scoring().primary(d);
                    scored.rank = p.rank(scored.rank, scored.gain, hole, primary);
                }
                report(name, Ok(scored.score));
                let better = best.is_none_or(|(b, b_scored, _)| {
                    better_node(plan.node_policy, scored.rank, name, b_scored.rank, b.name())
                });
                if better {
                    best = Some((node, scored, has_picks));
                    if has_picks {
                        std::mem::swap(&mut scratch.best, &mut scratch.picks);
                    }
                }
            }
        }
    }
    let (node, scored, has_picks) = best?;
    // Only the winner's devices are chosen when its fit was skipped (same fit, same
    // picks as without the shortcut); the caller fits it again if this scan cannot.
    let picks = if has_picks {
        Some(std::mem::take(&mut scratch.best))
    } else {
        match steps {
            Ok(steps) => {
                fit_node_compact(plan, steps, node, &mut scratch).ok()?;
                Some(std::mem::take(&mut scratch.picks))
            }
            Err(_) => None,
        }
    };
    Some(Best {
        node,
        scored,
        picks,
    })
}

/// The one step of a plan whose nodes can be ranked without choosing devices: one
/// container asking one vendor, under a node policy that does not look at the picks
/// (binpack, spread: the node score is the usage before the pod) and a device fit whose
/// outcome does not depend on the order devices are tried ([`FitSettings::order_free`]).
/// Then a node fits exactly when enough of its devices pass the checks.
fn quick_step<'s, 'p>(plan: &PodPlan, steps: &'s [Step<'p>]) -> Option<&'s Step<'p>> {
    let [step] = steps else {
        return None;
    };
    (plan.node_policy != NodePolicy::Frag && step.settings.order_free()).then_some(step)
}

/// Whether `step` fits on the node (`None`: the node lacks the vendor).
fn fits_anywhere(node: &NodeState, step: &Step<'_>, vendor_key: &str) -> Option<bool> {
    let group = node.group(vendor_key)?;
    let set = node.device_set(group)?;
    Some(enough_devices_pass(
        set,
        node.group_usage(group),
        step.req,
        &step.settings,
    ))
}

/// Whether node `a` beats node `b` under the policy, by rank; ties go to the smaller name.
fn better_node(policy: NodePolicy, a_rank: f64, a: &str, b_rank: f64, b: &str) -> bool {
    let by_rank = match policy {
        NodePolicy::Binpack | NodePolicy::Frag => a_rank.total_cmp(&b_rank),
        NodePolicy::Spread => b_rank.total_cmp(&a_rank),
    };
    by_rank.then_with(|| b.cmp(a)).is_gt()
}

/// The pod annotations the scheduler writes for a placement
/// (`docs/protocol.md#pod-annotations-the-scheduler-writes`, `docs/vendors.md`):
/// node, decision time, and per vendor the to-allocate and allocated device strings and
/// whatever else that vendor's device plugin expects.
pub fn allocation_annotations(
    registry: &VendorRegistry,
    plan: &PodPlan,
    node: &str,
    fit: &NodeFit,
    now_unix: i64,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    out.insert(keys::VGPU_NODE.to_string(), node.to_string());
    out.insert(keys::VGPU_TIME.to_string(), now_unix.to_string());
    let container_names: Vec<&str> = plan
        .requests
        .containers
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    for (vendor_key, devices) in &fit.devices {
        let Some(v) = registry.get(vendor_key) else {
            continue;
        };
        let value = encode_pod_single_device(devices);
        if let Some(key) = v.to_allocate_annotation() {
            out.insert(key.to_string(), value.clone());
        }
        out.insert(v.allocated_annotation().to_string(), value);
        let constraints = plan.constraints.get(vendor_key).unwrap_or(&NO_CONSTRAINTS);
        let requests: Vec<Option<&ContainerDeviceRequest>> = plan
            .requests
            .containers
            .iter()
            .map(|c| c.by_vendor.get(vendor_key))
            .collect();
        let node_devices = fit
            .inventory
            .vendors
            .iter()
            .find(|vd| &vd.vendor == vendor_key)
            .map_or(&[][..], |vd| vd.devices.as_slice());
        out.extend(v.extra_annotations(&AllocationContext {
            node,
            devices,
            requests: &requests,
            node_devices,
            container_names: &container_names,
            constraints,
            now_unix,
        }));
    }
    out
}
