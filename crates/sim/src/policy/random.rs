//! Random-fit: a uniformly random feasible node; for sharing tasks a uniformly
//! random GPU that fits, for whole-GPU tasks the lowest-index free GPUs.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{Placement, Policy};
use crate::Task;
use crate::cluster::{Cluster, lowest_fitting_gpus};

#[derive(Debug)]
pub struct RandomFit {
    rng: ChaCha8Rng,
}

impl RandomFit {
    pub fn new(seed: u64) -> Self {
        // A stream separate from the arrival stream of the same seed.
        Self {
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x005E_ED0F_7A5C),
        }
    }
}

impl Policy for RandomFit {
    fn place(
        &mut self,
        cluster: &Cluster,
        _ranks: &[u32],
        task: &Task,
        feasible: &[u32],
    ) -> Option<Placement> {
        if feasible.is_empty() {
            return None;
        }
        let node = feasible[self.rng.random_range(0..feasible.len())] as usize;
        let state = cluster.nodes.get(node)?;
        let gpus = if task.is_sharing() {
            // Reservoir sampling over the fitting GPUs.
            let mut chosen = None;
            let mut seen = 0u32;
            for g in 0..usize::from(state.gpu_count) {
                if state.gpu_fits(g, task.milli, cluster.slots) {
                    seen += 1;
                    if self.rng.random_range(0..seen) == 0 {
                        chosen = Some(g);
                    }
                }
            }
            chosen.map_or(0, |g| 1u16 << g)
        } else {
            lowest_fitting_gpus(state, task, cluster.slots)
        };
        Some(Placement { node, gpus })
    }
}
