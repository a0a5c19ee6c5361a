//! hami-sim: a trace-driven GPU-sharing scheduling simulator following the
//! FGD paper's methodology (Weng et al., USENIX ATC '23) on the Alibaba openb
//! trace, with the paper's baselines, HAMi's binpack/spread and our
//! fragmentation-aware policy (`hami-frag`, scoring in [`frag`]).
//!
//! Entry points: [`Experiment`] for library use and [`cli::run_simulate`] for
//! the `hamictl simulate` subcommand.

pub mod arrivals;
pub mod cli;
pub mod cluster;
pub mod data;
pub mod error;
pub mod frag;
pub mod go_rand;
pub mod metrics;
pub mod policy;
pub mod runner;
pub mod svg;
pub mod tables;
pub mod task;
pub mod trace;

use std::path::Path;

pub use cli::{SimulateArgs, run_simulate};
pub use error::SimError;
pub use task::Task;

use frag::TypicalWorkload;
use metrics::Curve;
use policy::{PolicyInit, make_policy};
use runner::RunOutput;
use trace::{ModelTable, NodeRecord, PodRecord};

/// Coverage of the typical workload (the paper's `podPopularityThreshold`).
pub const TYPICAL_COVERAGE_PCT: u32 = 95;

/// A loaded cluster and trace variant.
#[derive(Debug, Clone)]
pub struct Experiment {
    pub nodes: Vec<NodeRecord>,
    pub pods: Vec<PodRecord>,
    pub models: ModelTable,
    /// M, computed from the original (untuned) pod list.
    pub workload: TypicalWorkload,
}

/// One finished run.
#[derive(Debug, Clone)]
pub struct SeedRun {
    pub seed: u64,
    pub output: RunOutput,
    pub curve: Curve,
    /// The failed-task histogram.
    pub failed: Vec<metrics::FailedShape>,
}

impl Experiment {
    pub fn load(nodes: &Path, pods: &Path) -> Result<Self, SimError> {
        let mut models = ModelTable::default();
        let nodes = trace::load_nodes(nodes, &mut models)?;
        let pods = trace::load_pods(pods, &mut models)?;
        let workload = frag::typical_workload(
            pods.iter().map(|p| (p.class_key(), p.memory_mib)),
            TYPICAL_COVERAGE_PCT,
        );
        Ok(Self {
            nodes,
            pods,
            models,
            workload,
        })
    }

    /// GPUs per model id.
    pub fn gpus_per_model(&self) -> Vec<i64> {
        let mut out =
            vec![0i64; usize::from(self.nodes.iter().map(|n| n.model).max().unwrap_or(0)) + 1];
        for n in &self.nodes {
            out[usize::from(n.model)] += i64::from(n.gpus);
        }
        out
    }

    pub fn capacity(&self) -> i64 {
        self.nodes.iter().map(|n| i64::from(n.gpus)).sum::<i64>() * 1000
    }

    /// One sampled run (`docs/simulator.md#arrival-stream`) of `policy` with `seed`.
    pub fn run_seed(
        &self,
        policy: &str,
        seed: u64,
        tune: f64,
        slots: u16,
    ) -> Result<SeedRun, SimError> {
        let arr =
            arrivals::sample_arrivals(&self.pods, self.nodes.len(), self.capacity(), tune, seed);
        self.run_arrivals(policy, seed, &arr.pods, &arr.ranks, slots)
    }

    /// Runs a given arrival order with given node ranks.
    pub fn run_arrivals(
        &self,
        policy: &str,
        seed: u64,
        pods: &[PodRecord],
        ranks: &[u32],
        slots: u16,
    ) -> Result<SeedRun, SimError> {
        if ranks.len() != self.nodes.len() {
            return Err(SimError::Invalid(format!(
                "{} ranks for {} nodes",
                ranks.len(),
                self.nodes.len()
            )));
        }
        let (tasks, n_types) = task::to_tasks(pods);
        let gpus_per_model = self.gpus_per_model();
        let init = PolicyInit {
            workload: &self.workload,
            pods: &self.pods,
            n_nodes: self.nodes.len(),
            gpus_per_model: &gpus_per_model,
            n_types,
            seed,
        };
        let mut p = make_policy(policy, &init)?;
        let output = runner::simulate(
            &self.nodes,
            &tasks,
            ranks,
            &self.workload,
            p.as_mut(),
            slots,
            true,
        );
        let curve = metrics::bin_events(&output.events, output.total_gpus, output.capacity);
        let failed =
            metrics::failed_tasks(pods, &output.decisions, &output.events, output.total_gpus);
        Ok(SeedRun {
            seed,
            output,
            curve,
            failed,
        })
    }

    /// Loads a golden replay (arrival order and node ranks).
    pub fn load_replay(
        &mut self,
        arrivals: &Path,
        ranks: &Path,
    ) -> Result<(Vec<PodRecord>, Vec<u32>), SimError> {
        let pods = trace::load_replay_arrivals(arrivals, &mut self.models)?;
        let ranks = trace::load_replay_ranks(ranks, &self.nodes)?;
        Ok((pods, ranks))
    }
}
