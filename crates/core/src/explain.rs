//! Why a pod goes where it goes, node by node: the placement engine's answer
//! ([`crate::engine::place_explained`]) in the form `hamictl explain` prints and
//! hami-scheduler's dashboard serves, so both say the same thing for the same usage.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::engine::{Placement, PodPlan};
use crate::model::ContainerDevice;

/// One pod's placement over its candidate nodes.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Explanation {
    /// The node the scheduler would choose, if any fits.
    pub node: Option<String>,
    /// On the chosen node: per container (init containers first, in spec order), the
    /// devices it would get; empty when no node fits.
    pub containers: Vec<Vec<ContainerDevice>>,
    /// Every candidate that does not fit, with HAMi's reason text
    /// (`1/2 CardInsufficientMemory, 1/2 CardNotHealth`), as FailedNodes says it.
    pub failed_nodes: BTreeMap<String, String>,
    /// The node score of every candidate that fits.
    pub scores: BTreeMap<String, f32>,
}

impl Explanation {
    /// The explanation of `placement`, made for `plan`'s pod.
    pub fn of(plan: &PodPlan, placement: &Placement) -> Self {
        let containers = match &placement.chosen {
            None => Vec::new(),
            Some((_, fit)) => (0..plan.requests.containers.len())
                .map(|i| {
                    fit.devices
                        .values()
                        .flat_map(|per_container| per_container.get(i).cloned().unwrap_or_default())
                        .collect()
                })
                .collect(),
        };
        Explanation {
            node: placement.chosen.as_ref().map(|(n, _)| n.clone()),
            containers,
            failed_nodes: placement.failed.clone(),
            scores: placement.scores.clone(),
        }
    }

    /// Whether some node fits.
    pub fn fits(&self) -> bool {
        self.node.is_some()
    }
}
