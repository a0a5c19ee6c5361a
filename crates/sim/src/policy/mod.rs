//! Placement policies. Each policy sees the feasible nodes (already filtered
//! by `docs/simulator.md#placement`) and returns the chosen node and GPUs. Node ties always go
//! to the lowest per-seed rank, as in the paper's forked kube-scheduler.

mod bestfit;
mod cache;
mod clustering;
mod dotprod;
mod engine;
mod fgd;
mod hami;
mod hami_frag;
mod packing;
mod random;

pub use bestfit::{BestFit, bestfit_raw};
pub use cache::ScoreCache;
pub use clustering::{Clustering, clustering_score};
pub use dotprod::{DotProd, dotprod_score};
pub use engine::{EngineMode, EnginePolicy};
pub use fgd::{Fgd, fgd_node_score};
pub use hami::{Hami, HamiMode, hami_device_score, hami_gpus, hami_node_score};
pub use hami_frag::HamiFrag;
pub use packing::{Packing, packing_score};
pub use random::RandomFit;

use crate::Task;
use crate::cluster::{Cluster, best_fit_gpus};
use crate::error::SimError;
use crate::frag::{FragScoreConfig, TypicalWorkload};

/// Node and GPU(s) chosen for a task; `gpus` is a bitmask of GPU indexes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    pub node: usize,
    pub gpus: u16,
}

/// What a policy may need at construction time.
#[derive(Debug, Clone, Copy)]
pub struct PolicyInit<'a> {
    pub workload: &'a TypicalWorkload,
    /// The variant's original pods (for policies that derive their own M).
    pub pods: &'a [crate::trace::PodRecord],
    pub n_nodes: usize,
    /// GPUs per model id in the cluster (for our policy's model-scarcity term).
    pub gpus_per_model: &'a [i64],
    pub n_types: usize,
    pub seed: u64,
}

pub trait Policy: Send {
    /// Chooses among `feasible` (non-empty) node indexes.
    fn place(
        &mut self,
        cluster: &Cluster,
        ranks: &[u32],
        task: &Task,
        feasible: &[u32],
    ) -> Option<Placement>;
}

/// All policy names, in the order `--list-policies` prints them.
pub const POLICY_NAMES: &[&str] = &[
    "random",
    "dotprod",
    "clustering",
    "packing",
    "bestfit",
    "fgd",
    "hami-binpack",
    "hami-spread",
    "hami-frag",
    "engine-binpack",
    "engine-spread",
    "engine-frag",
];

/// Builds a policy by name.
pub fn make_policy(name: &str, init: &PolicyInit<'_>) -> Result<Box<dyn Policy>, SimError> {
    Ok(match name {
        "random" => Box::new(RandomFit::new(init.seed)),
        "dotprod" => Box::new(DotProd),
        "clustering" => Box::new(Clustering),
        "packing" => Box::new(Packing),
        "bestfit" => Box::new(BestFit::default()),
        "fgd" => Box::new(Fgd::new(init)),
        "hami-binpack" => Box::new(Hami::new(HamiMode::Binpack)),
        "hami-spread" => Box::new(Hami::new(HamiMode::Spread)),
        "hami-frag" => Box::new(HamiFrag::new(init, FragScoreConfig::default())),
        "engine-binpack" => Box::new(EnginePolicy::new(init, EngineMode::Binpack)),
        "engine-spread" => Box::new(EnginePolicy::new(init, EngineMode::Spread)),
        "engine-frag" => Box::new(EnginePolicy::new(init, EngineMode::Frag)),
        // `hami-frag:key=value,...` (and `engine-frag:...`) select a tuning variant.
        other => {
            let tuned = |spec: &str| {
                FragScoreConfig::parse(spec).map_err(|e| SimError::Invalid(format!("{other}: {e}")))
            };
            if let Some(spec) = other.strip_prefix("hami-frag:") {
                Box::new(HamiFrag::new(init, tuned(spec)?))
            } else if let Some(spec) = other.strip_prefix("engine-frag:") {
                Box::new(EnginePolicy::with_config(
                    init,
                    EngineMode::Frag,
                    tuned(spec)?,
                ))
            } else {
                return Err(SimError::UnknownPolicy(other.to_string()));
            }
        }
    })
}

/// The paper's baselines: the best node by `score` (ties to the lowest rank), then the
/// best-fit GPUs on it.
pub fn place_with_best_fit_gpus<F>(
    cluster: &Cluster,
    ranks: &[u32],
    task: &Task,
    feasible: &[u32],
    score: F,
) -> Option<Placement>
where
    F: FnMut(usize) -> Option<f64>,
{
    let node = pick_best(feasible, ranks, score)?;
    Some(Placement {
        node,
        gpus: best_fit_gpus(&cluster.nodes[node], task, cluster.slots),
    })
}

/// Argmax of `score` over `feasible`; equal scores go to the lowest rank.
/// Nodes scored `None` are skipped.
pub fn pick_best<F>(feasible: &[u32], ranks: &[u32], mut score: F) -> Option<usize>
where
    F: FnMut(usize) -> Option<f64>,
{
    let mut best: Option<(f64, u32, usize)> = None;
    for &n in feasible {
        let n = n as usize;
        let Some(s) = score(n) else { continue };
        let r = ranks.get(n).copied().unwrap_or(u32::MAX);
        let better = match best {
            None => true,
            Some((bs, br, _)) => s > bs || (s == bs && r < br),
        };
        if better {
            best = Some((s, r, n));
        }
    }
    best.map(|(_, _, n)| n)
}
