//! Fitting one container's request onto one node's devices (`docs/protocol.md#fit-checks`), with
//! HAMi's checks in HAMi's order and its reason names.

use std::collections::BTreeSet;

use crate::accounting::collapsed_totals;
use crate::codec::scoring_weights::ScoringWeights;
use crate::codec::topology::PairScores;
use crate::frag::live::FragNode;
use crate::model::{ContainerDevice, ContainerDeviceRequest, DeviceInfo};
use crate::policy::{DeviceKeys, GpuPolicy};
use crate::quota::{QuotaBudget, QuotaRefusal};
use crate::reason::{NODE_INSUFFICIENT_DEVICE, Reason, ReasonCounts};
use crate::request::ContainerKind;
use crate::score::{Usage, device_score};
use crate::vendor::{CapacityCheck, DeviceConstraints, Vendor, contains_ignore_ascii_case};

/// Mode string of devices partitioned with MIG.
const MIG_MODE: &str = "mig";

/// Facts about a registered device that never change while it stays registered,
/// computed once so the fit never reads device strings on its hot path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeviceFacts {
    /// The registered type names the vendor (HAMi's pre-filter: case-insensitive
    /// substring of the request type, which is the vendor key).
    pub of_vendor: bool,
    /// Partitioned with MIG.
    pub mig: bool,
}

impl DeviceFacts {
    pub fn of(info: &DeviceInfo, vendor_key: &str) -> Self {
        DeviceFacts {
            of_vendor: contains_ignore_ascii_case(&info.dev_type, vendor_key),
            mig: &*info.mode == MIG_MODE,
        }
    }
}

/// Everything the walk needs about one node's devices of one vendor.
#[derive(Debug, Clone, Copy)]
pub struct DeviceSet<'a> {
    pub infos: &'a [DeviceInfo],
    /// Same length as `infos`.
    pub facts: &'a [DeviceFacts],
    pub cordon: &'a BTreeSet<String>,
    pub pair_scores: &'a PairScores,
}

/// The per-pod settings of a container fit.
#[derive(Debug, Clone, Copy)]
pub struct FitSettings<'a> {
    pub vendor: &'a dyn Vendor,
    /// Every device of the vendor passes the type check for this request
    /// ([`Vendor::accepts_any_type`]): the per-device check is skipped.
    pub any_type: bool,
    pub constraints: &'a DeviceConstraints,
    pub policy: &'a GpuPolicy,
    pub weights: &'a ScoringWeights,
    /// The namespace's ResourceQuota on this vendor's devices, when one applies.
    pub quota: Option<&'a QuotaBudget>,
    /// Set for GPU policy `frag` (per node): device scores come from the fragmentation
    /// model's view of the node.
    pub frag: Option<FragNode<'a>>,
    /// The vendor's own capacity checks replace the shared ones
    /// ([`Vendor::custom_capacity`]).
    pub custom_capacity: bool,
    /// The vendor may refuse a whole node first ([`Vendor::checks_node`]).
    pub node_check: bool,
    /// The vendor may pick among the fitting devices itself
    /// ([`Vendor::may_choose_devices`]).
    pub vendor_choice: bool,
}

impl FitSettings<'_> {
    /// Whether a device passes regardless of the devices tried before it: no NUMA
    /// binding, topology, quota or vendor choice among the fitting devices. Then the fit's picks are simply the best passing
    /// devices, and a container fits exactly when enough devices pass
    /// ([`enough_devices_pass`]), so nodes can be ranked without choosing devices.
    pub fn order_free(&self) -> bool {
        !self.constraints.numa_bind
            && !self.policy.topology_aware
            && self.quota.is_none()
            && !self.node_check
            && !self.vendor_choice
    }
}

/// Why a container did not fit on a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FitFailure {
    /// Fewer devices of the vendor than requested (`NodeInsufficientDevice`).
    InsufficientDevices,
    /// Per-device reasons; rendered with [`ReasonCounts::render`].
    Devices {
        counts: ReasonCounts,
        devices: usize,
        /// The first ResourceQuota refusal met, with its numbers (counted as
        /// `ResourceQuotaNotFit`).
        quota: Option<Box<QuotaRefusal>>,
    },
}

impl FitFailure {
    /// HAMi's reason text for `FailedNodes` and events; a quota refusal adds its numbers
    /// (`docs/protocol.md#resourcequota`).
    pub fn render(&self) -> String {
        match self {
            FitFailure::InsufficientDevices => NODE_INSUFFICIENT_DEVICE.to_string(),
            FitFailure::Devices {
                counts,
                devices,
                quota,
            } => match quota {
                None => counts.render(*devices),
                Some(q) => format!("{} ({q})", counts.render(*devices)),
            },
        }
    }
}

/// The pod around one container's fit on one node: which container it is, and the
/// devices of this vendor its earlier containers took there (HAMi's `allocated`).
#[derive(Debug, Clone, Copy, Default)]
pub struct PodSoFar<'a> {
    /// The container's index (init containers first).
    pub container: usize,
    /// Container kinds of the pod, for collapsing its usage as the ledger does.
    pub kinds: &'a [ContainerKind],
    /// Picks of the pod's earlier containers on this vendor's devices of the node.
    pub placed: &'a [Placed],
    /// A later container of the pod fits on this vendor's devices: leave the device list
    /// in the order this container's sort made, as HAMi's in-place sort does.
    pub keep_order: bool,
}

/// One vendor's devices of a node while a pod is fitted on them.
#[derive(Debug)]
pub struct DeviceWork<'w> {
    /// What each device holds; a fit adds its picks, so later containers see them.
    pub usage: &'w mut [Usage],
    /// Each device's position in HAMi's device list ([`DeviceKeys::rank`]): registration
    /// order (`0..n`) before the pod's first container.
    pub rank: &'w mut [u32],
}

/// A device chosen for a container: its position in the node's device list and what it
/// gives. Kept compact so nodes that lose the comparison never allocate device strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pick {
    pub pos: usize,
    pub mem: u32,
    pub cores: u32,
    /// Slots taken ([`Vendor::slots_taken`]).
    pub slots: u32,
}

/// A pick and the container it is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placed {
    pub container: usize,
    pub pick: Pick,
}

/// A device that passed every check: what it would give and how it sorts.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    pick: Pick,
    keys: DeviceKeys,
}

/// Buffers reused across containers and nodes so the hot path does not allocate.
#[derive(Debug, Default)]
pub struct FitScratch {
    order: Vec<usize>,
    keys: Vec<DeviceKeys>,
    passing: Vec<Candidate>,
}

/// The wire form of a pick.
pub fn container_device(
    vendor: &dyn Vendor,
    infos: &[DeviceInfo],
    req: &ContainerDeviceRequest,
    p: &Pick,
) -> ContainerDevice {
    let info = &infos[p.pos];
    ContainerDevice {
        idx: info.index,
        uuid: info.id.to_string(),
        dev_type: vendor.allocated_type(info, req).to_string(),
        mem_mib: p.mem,
        cores: p.cores,
        // One slot is spelled 0, as the device string decodes it.
        slots: if p.slots > 1 { p.slots } else { 0 },
    }
}

/// Fits `req` onto `set` as HAMi's fit does (`docs/protocol.md#fit-checks`): the devices
/// in the policy's walk order, the first `req.count` that pass every check taken. The
/// picks are written into `out` (cleared first) in walk order and added to `work.usage`.
pub fn fit_container_into(
    set: DeviceSet<'_>,
    work: &mut DeviceWork<'_>,
    req: &ContainerDeviceRequest,
    s: FitSettings<'_>,
    pod: PodSoFar<'_>,
    scratch: &mut FitScratch,
    out: &mut Vec<Pick>,
) -> Result<(), FitFailure> {
    out.clear();
    let serving = set.facts.iter().filter(|f| f.of_vendor).count();
    if req.count as usize > serving {
        return Err(FitFailure::InsufficientDevices);
    }
    // Whether a device passes does not depend on the walk order: no full sort.
    if s.order_free() {
        best_passing(set, work, req, &s, scratch, out)?;
        if pod.keep_order {
            walk_order(set, work, req, &s, scratch);
            keep_walk_order(&scratch.order, work.rank);
        }
    } else {
        walk_in_order(set, work, req, &s, pod, scratch, out)?;
        if pod.keep_order {
            keep_walk_order(&scratch.order, work.rank);
        }
    }
    for p in out.iter() {
        work.usage[p.pos].add(p.slots, u64::from(p.mem), u64::from(p.cores));
    }
    Ok(())
}

/// HAMi sorts the list ascending and walks it from the end, so the list it leaves is
/// the walk order reversed: the next container's ties keep that order.
fn keep_walk_order(order: &[usize], rank: &mut [u32]) {
    let last = order.len().saturating_sub(1);
    for (k, &pos) in order.iter().enumerate() {
        rank[pos] = (last - k) as u32;
    }
}

#[inline(always)]
fn keys_of(
    set: DeviceSet<'_>,
    work: &DeviceWork<'_>,
    req: &ContainerDeviceRequest,
    s: &FitSettings<'_>,
    i: usize,
) -> DeviceKeys {
    DeviceKeys {
        score: match s.frag {
            Some(m) => m.device_score(set.infos, work.usage, i, req),
            None => device_score(&set.infos[i], &work.usage[i], Some(req), s.weights),
        },
        numa: set.infos[i].numa,
        used: work.usage[i].used,
        index: set.infos[i].index,
        rank: work.rank[i],
    }
}

/// The vendor's devices in the policy's walk order, into `scratch.order`.
fn walk_order(
    set: DeviceSet<'_>,
    work: &DeviceWork<'_>,
    req: &ContainerDeviceRequest,
    s: &FitSettings<'_>,
    scratch: &mut FitScratch,
) {
    scratch.order.clear();
    scratch.keys.clear();
    for i in 0..set.infos.len() {
        scratch.keys.push(keys_of(set, work, req, s, i));
        if set.facts[i].of_vendor {
            scratch.order.push(i);
        }
    }
    let keys = &scratch.keys;
    scratch
        .order
        .sort_by(|&a, &b| s.policy.prefer(&keys[a], &keys[b], s.constraints.numa_bind));
}

/// Whether at least `req.count` devices pass every check: exactly when the fit succeeds
/// under [`FitSettings::order_free`] settings, found without scoring any device and
/// stopping at the first `count` that pass.
pub fn enough_devices_pass(
    set: DeviceSet<'_>,
    usage: &[Usage],
    req: &ContainerDeviceRequest,
    s: &FitSettings<'_>,
) -> bool {
    let need = req.count as usize;
    let mut passing = 0;
    for (i, info) in set.infos.iter().enumerate() {
        if !set.facts[i].of_vendor {
            continue;
        }
        if let Check::Reject(_) = check_device(info, req, s, set.cordon) {
            continue;
        }
        if check_capacity(info, set.facts[i], &usage[i], req, s, |_, _| Ok(())).is_ok() {
            passing += 1;
            if passing >= need {
                return true;
            }
        }
    }
    false
}

/// Order-free fit: check every serving device once, keep the `count` best that pass.
fn best_passing(
    set: DeviceSet<'_>,
    work: &DeviceWork<'_>,
    req: &ContainerDeviceRequest,
    s: &FitSettings<'_>,
    scratch: &mut FitScratch,
    out: &mut Vec<Pick>,
) -> Result<(), FitFailure> {
    let mut counts = ReasonCounts::default();
    let mut serving = 0;
    let count = req.count as usize;
    scratch.passing.clear();
    // One device wanted (the common case): keep only the best so far, no list to sort.
    let mut best: Option<Candidate> = None;
    let mut passing = 0usize;
    for (i, info) in set.infos.iter().enumerate() {
        if !set.facts[i].of_vendor {
            continue;
        }
        serving += 1;
        let checked = match check_device(info, req, s, set.cordon) {
            Check::Reject(r) => Err(Rejection::Reason(r)),
            Check::NumaGate => {
                check_capacity(info, set.facts[i], &work.usage[i], req, s, |_, _| Ok(()))
            }
        };
        match checked {
            Err(Rejection::Reason(r)) => counts.add(r, 1),
            // Not on this path: a quota makes the fit order-dependent.
            Err(Rejection::Quota(_)) => counts.add(Reason::ResourceQuotaNotFit, 1),
            Ok((mem, cores)) => {
                passing += 1;
                let candidate = Candidate {
                    pick: Pick {
                        pos: i,
                        mem,
                        cores,
                        slots: s.vendor.slots_taken(info, req),
                    },
                    keys: keys_of(set, work, req, s, i),
                };
                if count == 1 {
                    let better = best.as_ref().is_none_or(|b| {
                        s.policy.prefer(&candidate.keys, &b.keys, false) == std::cmp::Ordering::Less
                    });
                    if better {
                        best = Some(candidate);
                    }
                } else {
                    scratch.passing.push(candidate);
                }
            }
        }
    }
    if passing < count {
        if passing > 0 {
            counts.add(Reason::AllocatedCardsInsufficientRequest, passing as u32);
        }
        return Err(FitFailure::Devices {
            counts,
            devices: serving,
            quota: None,
        });
    }
    if count == 1 {
        out.extend(best.map(|b| b.pick));
    } else {
        scratch
            .passing
            .sort_by(|a, b| s.policy.prefer(&a.keys, &b.keys, false));
        out.extend(scratch.passing[..count].iter().map(|c| c.pick));
    }
    Ok(())
}

/// HAMi's walk: devices in preference order, NUMA groups and quota depending on what was
/// picked before.
fn walk_in_order(
    set: DeviceSet<'_>,
    work: &DeviceWork<'_>,
    req: &ContainerDeviceRequest,
    s: &FitSettings<'_>,
    pod: PodSoFar<'_>,
    scratch: &mut FitScratch,
    out: &mut Vec<Pick>,
) -> Result<(), FitFailure> {
    walk_order(set, work, req, s, scratch);
    let serving = scratch.order.len();
    let mut counts = ReasonCounts::default();
    if s.node_check
        && let Err(r) = s.vendor.check_node(set.infos, req, s.constraints)
    {
        counts.add(r, 1);
        return Err(FitFailure::Devices {
            counts,
            devices: serving,
            quota: None,
        });
    }
    // The vendor picks among every fitting device (as `topology-aware` does).
    let choose = s.vendor_choice && s.vendor.chooses_devices(set.infos, req);
    let collect_all = choose || s.policy.topology_aware;
    let mut refusal: Option<QuotaRefusal> = None;
    let picks = out;
    let mut remaining = req.count;
    let mut prev_numa: Option<i32> = None;
    for &pos in &scratch.order {
        let info = &set.infos[pos];
        let u = &work.usage[pos];
        if let Check::Reject(r) = check_device(info, req, s, set.cordon) {
            counts.add(r, 1);
            continue;
        }
        if s.constraints.numa_bind {
            if prev_numa.is_some_and(|n| n != info.numa) && !picks.is_empty() {
                counts.add(Reason::NumaNotFit, picks.len() as u32);
                picks.clear();
                remaining = req.count;
            }
            prev_numa = Some(info.numa);
        }
        let quota = |mem: u32, cores: u32| match s.quota {
            None => Ok(()),
            Some(budget) => {
                let slots = 1;
                let (memory, cores) = pod_totals(
                    pod,
                    picks,
                    Pick {
                        pos,
                        mem,
                        cores,
                        slots,
                    },
                );
                budget.admit(memory, cores)
            }
        };
        let (mem, cores) = match check_capacity(info, set.facts[pos], u, req, s, quota) {
            Ok(mc) => mc,
            Err(Rejection::Reason(r)) => {
                counts.add(r, 1);
                continue;
            }
            Err(Rejection::Quota(q)) => {
                counts.add(Reason::ResourceQuotaNotFit, 1);
                refusal.get_or_insert(q);
                continue;
            }
        };
        picks.push(Pick {
            pos,
            mem,
            cores,
            slots: s.vendor.slots_taken(info, req),
        });
        if !collect_all {
            remaining -= 1;
            if remaining == 0 {
                break;
            }
        }
    }

    if choose {
        if picks.len() >= req.count as usize {
            let positions: Vec<usize> = picks.iter().map(|p| p.pos).collect();
            let chosen = s
                .vendor
                .choose_devices(set.infos, &positions, req.count as usize);
            let all = std::mem::take(picks);
            picks.extend(chosen.into_iter().filter_map(|i| all.get(i).copied()));
            picks.truncate(req.count as usize);
            if picks.len() < req.count as usize {
                // Enough devices fit, but not in a shape the vendor accepts.
                let reason = s.vendor.choice_failure();
                let n = match reason {
                    Reason::AllocatedCardsInsufficientRequest => picks.len().max(1),
                    _ => 1,
                };
                counts.add(reason, n as u32);
                picks.clear();
                return Err(FitFailure::Devices {
                    counts,
                    devices: serving,
                    quota: refusal.map(Box::new),
                });
            }
        }
    } else if s.policy.topology_aware && picks.len() > req.count as usize {
        let chosen = choose_by_topology(std::mem::take(picks), req.count as usize, set);
        *picks = chosen;
    }
    if picks.len() < req.count as usize {
        if !picks.is_empty() {
            counts.add(
                Reason::AllocatedCardsInsufficientRequest,
                picks.len() as u32,
            );
        }
        picks.clear();
        return Err(FitFailure::Devices {
            counts,
            devices: serving,
            quota: refusal.map(Box::new),
        });
    }
    Ok(())
}

/// What the pod would take of the vendor's devices with `candidate` added to this
/// container's picks: its earlier containers, this container and the candidate, collapsed
/// as the ledger counts it (HAMi's quota check, `docs/protocol.md#resourcequota`).
fn pod_totals(pod: PodSoFar<'_>, picks: &[Pick], candidate: Pick) -> (u64, u64) {
    let earlier = pod.placed.iter().map(|p| (p.container, p.pick));
    let current = picks
        .iter()
        .chain(std::iter::once(&candidate))
        .map(|p| (pod.container, *p));
    collapsed_totals(
        earlier
            .chain(current)
            .map(|(c, p)| (c, p.pos, u64::from(p.mem), u64::from(p.cores))),
        pod.kinds,
    )
}

enum Check {
    Reject(Reason),
    /// Passed the identity checks; the NUMA gate and capacity checks come next.
    NumaGate,
}

/// Checks 1–3 of HAMi's order: health, cordon, type.
#[inline(always)]
fn check_device(
    info: &DeviceInfo,
    req: &ContainerDeviceRequest,
    s: &FitSettings<'_>,
    cordon: &BTreeSet<String>,
) -> Check {
    if !info.health {
        return Check::Reject(Reason::CardNotHealth);
    }
    if !cordon.is_empty() && cordon.contains(&*info.id) {
        return Check::Reject(Reason::CardCordoned);
    }
    if !s.any_type && !s.vendor.type_matches(info, req, s.constraints) {
        return Check::Reject(Reason::CardTypeMismatch);
    }
    Check::NumaGate
}

/// Why a device that passed the identity checks was refused.
enum Rejection {
    Reason(Reason),
    Quota(QuotaRefusal),
}

impl From<Reason> for Rejection {
    fn from(r: Reason) -> Self {
        Rejection::Reason(r)
    }
}

/// Checks 5–15 of HAMi's order; returns the memory and cores the device would give.
/// `quota` judges the pod's usage with this device at its memory and cores.
#[inline(always)]
fn check_capacity(
    info: &DeviceInfo,
    facts: DeviceFacts,
    u: &Usage,
    req: &ContainerDeviceRequest,
    s: &FitSettings<'_>,
    quota: impl FnOnce(u32, u32) -> Result<(), QuotaRefusal>,
) -> Result<(u32, u32), Rejection> {
    if !s.constraints.selector.uuid_allowed(&info.id) {
        return Err(Reason::CardUuidMismatch.into());
    }
    if s.custom_capacity {
        let (mem, cores) = s.vendor.check_capacity(&CapacityCheck {
            info,
            usage: u,
            req,
            constraints: s.constraints,
            mutex: s.policy.mutex,
        })?;
        quota(mem, cores).map_err(Rejection::Quota)?;
        return Ok((mem, cores));
    }
    check_slots(info, u, s.policy.mutex)?;
    let cores = req.cores_clamped();
    let mem = req.memory_on(info.mem_mib);
    quota(mem, cores).map_err(Rejection::Quota)?;
    check_resources(info, u, mem, cores)?;
    if facts.mig {
        // MIG partitioning is not placed by hami-rs yet: refusing is safe, guessing is not.
        return Err(Reason::CardMigTopologyInfeasible.into());
    }
    Ok((mem, cores))
}

/// HAMi's slot checks: a free time slice, and under `mutex` an idle device.
#[inline(always)]
pub fn check_slots(info: &DeviceInfo, u: &Usage, mutex: bool) -> Result<(), Reason> {
    if info.count <= u.used {
        return Err(Reason::CardTimeSlicingExhausted);
    }
    if mutex && u.used > 0 {
        return Err(Reason::ExclusiveDeviceAllocateConflict);
    }
    Ok(())
}

/// HAMi's memory and compute checks for `mem` MiB and `cores` percent on one device:
/// enough free of both, 100 cores means the device alone, and a device whose compute
/// is all taken takes no task that asks for none.
#[inline(always)]
pub fn check_resources(info: &DeviceInfo, u: &Usage, mem: u32, cores: u32) -> Result<(), Reason> {
    if u64::from(info.mem_mib).saturating_sub(u.mem_used) < u64::from(mem) {
        return Err(Reason::CardInsufficientMemory);
    }
    if u64::from(info.cores).saturating_sub(u.cores_used) < u64::from(cores) {
        return Err(Reason::CardInsufficientCore);
    }
    if info.cores == 100 && cores == 100 && u.used > 0 {
        return Err(Reason::ExclusiveDeviceAllocateConflict);
    }
    if info.cores != 0 && u.cores_used >= u64::from(info.cores) && cores == 0 {
        return Err(Reason::CardComputeUnitsExhausted);
    }
    Ok(())
}

/// Topology-aware choice among more fitting devices than needed: one device ⇒ the one
/// least connected to the others (keeps well-linked groups whole); several ⇒ the
/// subset with the highest pairwise score. First in walk order wins ties.
fn choose_by_topology(picks: Vec<Pick>, n: usize, set: DeviceSet<'_>) -> Vec<Pick> {
    let id = |p: &Pick| &*set.infos[p.pos].id;
    if n == 1 {
        let mut best: Option<(usize, i64)> = None;
        for (i, p) in picks.iter().enumerate() {
            let sum: i64 = picks
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, q)| set.pair_scores.score(id(p), id(q)))
                .sum();
            if best.is_none_or(|(_, b)| sum < b) {
                best = Some((i, sum));
            }
        }
        let keep = best.map_or(0, |(i, _)| i);
        return picks.into_iter().skip(keep).take(1).collect();
    }
    let m = picks.len();
    let pair: Vec<Vec<i64>> = (0..m)
        .map(|i| {
            (0..m)
                .map(|j| set.pair_scores.score(id(&picks[i]), id(&picks[j])))
                .collect()
        })
        .collect();
    let mut best: Option<(Vec<usize>, i64)> = None;
    let mut current = Vec::with_capacity(n);
    best_subset(&pair, n, 0, &mut current, 0, &mut best);
    let chosen: BTreeSet<usize> = best
        .map(|(v, _)| v.into_iter().collect())
        .unwrap_or_default();
    picks
        .into_iter()
        .enumerate()
        .filter(|(i, _)| chosen.contains(i))
        .map(|(_, p)| p)
        .collect()
}

/// Depth-first walk over k-subsets in lexicographic order; strict `>` keeps the first.
fn best_subset(
    pair: &[Vec<i64>],
    k: usize,
    start: usize,
    current: &mut Vec<usize>,
    score: i64,
    best: &mut Option<(Vec<usize>, i64)>,
) {
    if current.len() == k {
        if best.as_ref().is_none_or(|(_, b)| score > *b) {
            *best = Some((current.clone(), score));
        }
        return;
    }
    let m = pair.len();
    for i in start..m {
        if m - i < k - current.len() {
            break;
        }
        let add: i64 = current.iter().map(|&j| pair[j][i]).sum();
        current.push(i);
        best_subset(pair, k, i + 1, current, score + add, best);
        current.pop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::NvidiaConfig;
    use crate::quota::QuotaLimit;
    use crate::vendor::Nvidia;
    use proptest::prelude::*;

    fn device() -> impl Strategy<Value = (DeviceInfo, Usage)> {
        (
            1u32..4,
            100u32..1000,
            0i32..2,
            prop::bool::weighted(0.85),
            0u32..4,
            0u64..1000,
            0u64..101,
        )
            .prop_map(|(count, mem, numa, health, used, mem_used, cores_used)| {
                let info = DeviceInfo {
                    id: "".into(),
                    count,
                    mem_mib: mem,
                    cores: 100,
                    dev_type: "NVIDIA-T4".into(),
                    numa,
                    health,
                    ..Default::default()
                };
                let u = Usage {
                    used: used.min(count),
                    mem_used: mem_used.min(u64::from(mem)),
                    cores_used,
                };
                (info, u)
            })
    }

    /// A budget that never binds: the fit must take the ordered walk.
    fn unbounded() -> QuotaBudget {
        let limit = |r: &str| {
            Some(QuotaLimit {
                resource: r.into(),
                used: 0,
                hard: u64::MAX / 4,
            })
        };
        QuotaBudget {
            namespace: "ns".into(),
            memory: limit("nvidia.com/gpumem"),
            cores: limit("nvidia.com/gpucores"),
        }
    }

    proptest! {
        /// The order-free fast path must decide exactly as HAMi's ordered walk: the same
        /// picks in the same order, the same reasons, and the same list order left for
        /// the pod's next container, whatever order an earlier container left.
        #[test]
        fn fast_path_equals_ordered_walk(
            devs in prop::collection::vec(device(), 1..9),
            shuffle in any::<u64>(),
            count in 1u32..4,
            mem_mib in 0u32..600,
            cores in prop_oneof![Just(0u32), 1u32..100, Just(100u32)],
            policy in prop::sample::select(vec![
                "binpack", "spread", "mutex", "binpack,numa", "numa", "spread,binpack",
            ]),
        ) {
            let infos: Vec<DeviceInfo> = devs
                .iter()
                .enumerate()
                .map(|(i, (d, _))| DeviceInfo { id: format!("G{i}").into(), index: i as u32, ..d.clone() })
                .collect();
            let usage: Vec<Usage> = devs.iter().map(|(_, u)| *u).collect();
            // A list order an earlier container's sort may have left.
            let n = infos.len() as u64;
            let rank: Vec<u32> = (0..n).map(|i| ((i * 7 + shuffle) % n) as u32).collect();
            let vendor = Nvidia::new(NvidiaConfig::default());
            let constraints = DeviceConstraints::default();
            let policy = GpuPolicy::parse_lenient(policy);
            let weights = ScoringWeights::default();
            let cordon = BTreeSet::new();
            let pair_scores = PairScores::default();
            let facts: Vec<DeviceFacts> = infos.iter().map(|d| DeviceFacts::of(d, "NVIDIA")).collect();
            let set = DeviceSet { infos: &infos, facts: &facts, cordon: &cordon, pair_scores: &pair_scores };
            let fast = FitSettings { vendor: &vendor, any_type: false, constraints: &constraints, policy: &policy, weights: &weights, quota: None, frag: None, custom_capacity: false, node_check: false, vendor_choice: false };
            let budget = unbounded();
            let walk = FitSettings { quota: Some(&budget), ..fast };
            prop_assert!(fast.order_free() && !walk.order_free());
            let req = ContainerDeviceRequest { count, dev_type: "NVIDIA".into(), mem_mib, mem_percent: None, cores };
            let pod = PodSoFar { keep_order: true, ..PodSoFar::default() };
            let run = |s: FitSettings<'_>| {
                let (mut usage, mut rank, mut picks) = (usage.clone(), rank.clone(), Vec::new());
                let mut work = DeviceWork { usage: &mut usage, rank: &mut rank };
                let out = fit_container_into(set, &mut work, &req, s, pod, &mut FitScratch::default(), &mut picks);
                (out, picks, usage, rank)
            };
            let (a, b) = (run(fast), run(walk));
            prop_assert_eq!(&a.0, &b.0);
            prop_assert_eq!(&a.1, &b.1);
            prop_assert_eq!(&a.2, &b.2);
            if a.0.is_ok() {
                prop_assert_eq!(&a.3, &b.3);
            }
        }
    }
}
