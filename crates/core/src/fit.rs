//! Fitting one container's request onto one node's devices (`docs/protocol.md#fit-checks`), with
//! HAMi's checks in HAMi's order and its reason names.

use std::collections::BTreeSet;

use crate::codec::scoring_weights::ScoringWeights;
use crate::codec::topology::PairScores;
use crate::frag::live::FragNode;
use crate::model::{ContainerDevice, ContainerDeviceRequest, DeviceInfo};
use crate::policy::{DeviceKeys, GpuPolicy};
use crate::reason::{NODE_INSUFFICIENT_DEVICE, Reason, ReasonCounts};
use crate::score::{Usage, device_score};
use crate::vendor::{DeviceConstraints, Vendor, contains_ignore_ascii_case};

/// Mode string of devices partitioned with MIG.
const MIG_MODE: &str = "mig";

/// Namespace quota left for device memory and cores (`None` = no limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QuotaBudget {
    pub memory: Option<u64>,
    pub cores: Option<u64>,
}

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
            mig: info.mode == MIG_MODE,
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
    pub quota: QuotaBudget,
    /// Set for GPU policy `frag` (per node): device scores come from the fragmentation
    /// model's view of the node.
    pub frag: Option<FragNode<'a>>,
}

impl FitSettings<'_> {
    /// Whether a device passes regardless of the devices tried before it: no NUMA
    /// binding, topology or quota. Then the fit's picks are simply the best passing
    /// devices, and a container fits exactly when enough devices pass
    /// ([`enough_devices_pass`]), so nodes can be ranked without choosing devices.
    pub fn order_free(&self) -> bool {
        !self.constraints.numa_bind
            && !self.policy.topology_aware
            && self.quota.memory.is_none()
            && self.quota.cores.is_none()
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
    },
}

impl FitFailure {
    /// HAMi's reason text for `FailedNodes` and events.
    pub fn render(&self) -> String {
        match self {
            FitFailure::InsufficientDevices => NODE_INSUFFICIENT_DEVICE.to_string(),
            FitFailure::Devices { counts, devices } => counts.render(*devices),
        }
    }
}

/// Pod usage taken so far on this node, for quota checks across containers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PodTotals {
    pub memory: u64,
    pub cores: u64,
}

/// A device chosen for a container: its position in the node's device list and what it
/// gives. Kept compact so nodes that lose the comparison never allocate device strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pick {
    pub pos: usize,
    pub mem: u32,
    pub cores: u32,
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

/// Fits `req` onto `set` with the current `usage` (same length as `set.infos`). On
/// success the chosen devices are added to `usage` and returned in pick order.
pub fn fit_container(
    set: DeviceSet<'_>,
    usage: &mut [Usage],
    req: &ContainerDeviceRequest,
    s: FitSettings<'_>,
    totals: &mut PodTotals,
) -> Result<Vec<ContainerDevice>, FitFailure> {
    let mut picks = Vec::new();
    fit_container_into(
        set,
        usage,
        req,
        s,
        totals,
        &mut FitScratch::default(),
        &mut picks,
    )?;
    Ok(picks
        .iter()
        .map(|p| container_device(set.infos, req, p))
        .collect())
}

/// The wire form of a pick.
pub fn container_device(
    infos: &[DeviceInfo],
    req: &ContainerDeviceRequest,
    p: &Pick,
) -> ContainerDevice {
    let info = &infos[p.pos];
    ContainerDevice {
        idx: info.index,
        uuid: info.id.clone(),
        dev_type: req.dev_type.clone(),
        mem_mib: p.mem,
        cores: p.cores,
    }
}

/// [`fit_container`] writing compact picks into `out` (cleared first), reusing `scratch`.
pub fn fit_container_into(
    set: DeviceSet<'_>,
    usage: &mut [Usage],
    req: &ContainerDeviceRequest,
    s: FitSettings<'_>,
    totals: &mut PodTotals,
    scratch: &mut FitScratch,
    out: &mut Vec<Pick>,
) -> Result<(), FitFailure> {
    out.clear();
    // Whether a device passes does not depend on the walk order: no full sort.
    if s.order_free() {
        best_passing(set, usage, req, &s, scratch, out)?;
    } else {
        walk_in_order(set, usage, req, &s, *totals, scratch, out)?;
    }
    for p in out.iter() {
        usage[p.pos].add(1, u64::from(p.mem), u64::from(p.cores));
        totals.memory += u64::from(p.mem);
        totals.cores += u64::from(p.cores);
    }
    Ok(())
}

#[inline(always)]
fn keys_of(
    set: DeviceSet<'_>,
    usage: &[Usage],
    req: &ContainerDeviceRequest,
    s: &FitSettings<'_>,
    i: usize,
) -> DeviceKeys {
    DeviceKeys {
        score: match s.frag {
            Some(m) => m.device_score(set.infos, usage, i, req),
            None => device_score(&set.infos[i], &usage[i], Some(req), s.weights),
        },
        numa: set.infos[i].numa,
        used: usage[i].used,
        index: set.infos[i].index,
    }
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
        if check_capacity(info, set.facts[i], &usage[i], req, s, PodTotals::default()).is_ok() {
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
    usage: &[Usage],
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
            Check::Reject(r) => Err(r),
            Check::NumaGate => {
                check_capacity(info, set.facts[i], &usage[i], req, s, PodTotals::default())
            }
        };
        match checked {
            Err(r) => counts.add(r, 1),
            Ok((mem, cores)) => {
                passing += 1;
                let candidate = Candidate {
                    pick: Pick { pos: i, mem, cores },
                    keys: keys_of(set, usage, req, s, i),
                };
                if count == 1 {
                    // `min_by` semantics: the first of equal candidates wins.
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
    if count > serving {
        return Err(FitFailure::InsufficientDevices);
    }
    if passing < count {
        if passing > 0 {
            counts.add(Reason::AllocatedCardsInsufficientRequest, passing as u32);
        }
        return Err(FitFailure::Devices {
            counts,
            devices: serving,
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
#[allow(clippy::too_many_arguments)]
fn walk_in_order(
    set: DeviceSet<'_>,
    usage: &[Usage],
    req: &ContainerDeviceRequest,
    s: &FitSettings<'_>,
    totals: PodTotals,
    scratch: &mut FitScratch,
    out: &mut Vec<Pick>,
) -> Result<(), FitFailure> {
    scratch.order.clear();
    scratch.keys.clear();
    for i in 0..set.infos.len() {
        scratch.keys.push(keys_of(set, usage, req, s, i));
        if set.facts[i].of_vendor {
            scratch.order.push(i);
        }
    }
    let serving = scratch.order.len();
    if req.count as usize > serving {
        return Err(FitFailure::InsufficientDevices);
    }
    let keys = &scratch.keys;
    scratch
        .order
        .sort_by(|&a, &b| s.policy.prefer(&keys[a], &keys[b], s.constraints.numa_bind));

    let mut counts = ReasonCounts::default();
    let picks = out;
    let mut remaining = req.count;
    let mut prev_numa: Option<i32> = None;
    let mut taken = totals;
    for &pos in &scratch.order {
        let info = &set.infos[pos];
        let u = &usage[pos];
        if let Check::Reject(r) = check_device(info, req, s, set.cordon) {
            counts.add(r, 1);
            continue;
        }
        if s.constraints.numa_bind {
            if prev_numa.is_some_and(|n| n != info.numa) && !picks.is_empty() {
                counts.add(Reason::NumaNotFit, picks.len() as u32);
                taken = totals;
                picks.clear();
                remaining = req.count;
            }
            prev_numa = Some(info.numa);
        }
        let (mem, cores) = match check_capacity(info, set.facts[pos], u, req, s, taken) {
            Ok(mc) => mc,
            Err(r) => {
                counts.add(r, 1);
                continue;
            }
        };
        taken.memory += u64::from(mem);
        taken.cores += u64::from(cores);
        picks.push(Pick { pos, mem, cores });
        if !s.policy.topology_aware {
            remaining -= 1;
            if remaining == 0 {
                break;
            }
        }
    }

    if s.policy.topology_aware && picks.len() > req.count as usize {
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
        });
    }
    Ok(())
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
    if !cordon.is_empty() && cordon.contains(&info.id) {
        return Check::Reject(Reason::CardCordoned);
    }
    if !s.any_type && !s.vendor.type_matches(info, req, s.constraints) {
        return Check::Reject(Reason::CardTypeMismatch);
    }
    Check::NumaGate
}

/// Checks 5–15 of HAMi's order; returns the memory and cores the device would give.
#[inline(always)]
fn check_capacity(
    info: &DeviceInfo,
    facts: DeviceFacts,
    u: &Usage,
    req: &ContainerDeviceRequest,
    s: &FitSettings<'_>,
    taken: PodTotals,
) -> Result<(u32, u32), Reason> {
    if !s.constraints.selector.uuid_allowed(&info.id) {
        return Err(Reason::CardUuidMismatch);
    }
    if info.count <= u.used {
        return Err(Reason::CardTimeSlicingExhausted);
    }
    if s.policy.mutex && u.used > 0 {
        return Err(Reason::ExclusiveDeviceAllocateConflict);
    }
    let cores = req.cores_clamped();
    let mem = req.memory_on(info.mem_mib);
    let over =
        |limit: Option<u64>, used: u64, add: u32| limit.is_some_and(|l| used + u64::from(add) > l);
    if over(s.quota.memory, taken.memory, mem) || over(s.quota.cores, taken.cores, cores) {
        return Err(Reason::ResourceQuotaNotFit);
    }
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
    if facts.mig {
        // MIG partitioning is not placed by hami-rs yet: refusing is safe, guessing is not.
        return Err(Reason::CardMigTopologyInfeasible);
    }
    Ok((mem, cores))
}

/// Topology-aware choice among more fitting devices than needed: one device ⇒ the one
/// least connected to the others (keeps well-linked groups whole); several ⇒ the
/// subset with the highest pairwise score. First in walk order wins ties.
fn choose_by_topology(picks: Vec<Pick>, n: usize, set: DeviceSet<'_>) -> Vec<Pick> {
    let id = |p: &Pick| set.infos[p.pos].id.as_str();
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
                    id: String::new(),
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

    proptest! {
        /// The order-free fast path must decide exactly as HAMi's ordered walk.
        #[test]
        fn fast_path_equals_ordered_walk(
            devs in prop::collection::vec(device(), 1..9),
            count in 1u32..4,
            mem_mib in 0u32..600,
            cores in prop_oneof![Just(0u32), 1u32..100, Just(100u32)],
            policy in prop::sample::select(vec!["binpack", "spread", "mutex", "binpack,numa"]),
        ) {
            let infos: Vec<DeviceInfo> = devs
                .iter()
                .enumerate()
                .map(|(i, (d, _))| DeviceInfo { id: format!("G{i}"), index: i as u32, ..d.clone() })
                .collect();
            let usage: Vec<Usage> = devs.iter().map(|(_, u)| *u).collect();
            let vendor = Nvidia::new(NvidiaConfig::default());
            let constraints = DeviceConstraints::default();
            let policy = GpuPolicy::parse_lenient(policy);
            let weights = ScoringWeights::default();
            let cordon = BTreeSet::new();
            let pair_scores = PairScores::default();
            let facts: Vec<DeviceFacts> = infos.iter().map(|d| DeviceFacts::of(d, "NVIDIA")).collect();
            let set = DeviceSet { infos: &infos, facts: &facts, cordon: &cordon, pair_scores: &pair_scores };
            let s = FitSettings { vendor: &vendor, any_type: false, constraints: &constraints, policy: &policy, weights: &weights, quota: QuotaBudget::default(), frag: None };
            let req = ContainerDeviceRequest { count, dev_type: "NVIDIA".into(), mem_mib, mem_percent: None, cores };
            let (mut fast, mut walk) = (Vec::new(), Vec::new());
            let mut scratch = FitScratch::default();
            let a = best_passing(set, &usage, &req, &s, &mut scratch, &mut fast);
            let b = walk_in_order(set, &usage, &req, &s, PodTotals::default(), &mut scratch, &mut walk);
            prop_assert_eq!(a, b);
            prop_assert_eq!(fast, walk);
        }
    }
}
