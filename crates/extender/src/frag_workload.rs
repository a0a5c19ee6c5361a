//! The typical workload the `frag` policies optimise for, learnt from the pods the
//! extender sees (`docs/extender.md#the-typical-workload`): every pod the watch shows is
//! counted once into a decayed histogram of request shapes, and the fragmentation model
//! built from it is rebuilt at most every [`REFRESH_SECS`], when pods were seen or nodes
//! registered since. `/debug/frag-workload` on the admin port shows it.

use std::sync::{Arc, Mutex};

use hami_core::frag::live::FragModel;
use hami_core::frag::observed::{
    ClusterGpus, ModelTable, ObservedSettings, ObservedWorkload, PodShape,
};
use hami_core::frag::pairing::Pairing;
use hami_core::frag::score::FragScoreConfig;
use hami_core::ledger::Ledger;
use hami_core::sync::MutexExt;
use hami_server::{Handler, handler_fn, respond};
use hyper::StatusCode;
use serde_json::{Value, json};

use crate::state::SchedState;

/// Seconds a built model serves before new observations make it rebuild.
pub const REFRESH_SECS: i64 = 30;

/// Histogram shapes `/debug/frag-workload` lists.
const SHAPES_SHOWN: usize = 32;

/// A built model and what it was built from.
#[derive(Debug)]
struct Built {
    model: Arc<FragModel>,
    /// The pairing term with the sharing pods seen (`None`: its weight is 0).
    pairing: Option<Arc<Pairing>>,
    at: i64,
    seen: u64,
    registrations: u64,
}

/// The observed workload and the model in use.
#[derive(Debug)]
pub struct LiveFrag {
    observed: ObservedWorkload,
    cfg: FragScoreConfig,
    /// Bumped when a node's registration changes (GPU types and counts).
    registrations: u64,
    built: Option<Built>,
}

impl Default for LiveFrag {
    fn default() -> Self {
        LiveFrag::new(ObservedSettings::default(), FragScoreConfig::default())
    }
}

/// The GPU types of the nodes the ledger knows, with their counts and memory.
pub fn cluster_gpus(ledger: &Ledger) -> ClusterGpus {
    let mut gpus = ClusterGpus::default();
    for node in ledger.nodes() {
        for (vendor, _) in node.groups() {
            for d in &vendor.devices {
                let e = gpus
                    .types
                    .entry(d.dev_type.to_string())
                    .or_insert((0, d.mem_mib));
                e.0 += 1;
                e.1 = e.1.max(d.mem_mib);
            }
        }
    }
    gpus
}

impl LiveFrag {
    pub fn new(settings: ObservedSettings, cfg: FragScoreConfig) -> Self {
        LiveFrag {
            observed: ObservedWorkload::new(settings),
            cfg,
            registrations: 0,
            built: None,
        }
    }

    /// Counts a pod seen for the first time.
    pub fn observe(&mut self, shape: &PodShape) {
        self.observed.observe(shape);
    }

    /// A node's devices changed.
    pub fn note_registration_change(&mut self) {
        self.registrations = self.registrations.wrapping_add(1);
    }

    /// The model to place with at `now`, rebuilt when stale.
    pub fn model(&mut self, ledger: &Ledger, now: i64) -> Arc<FragModel> {
        self.built(ledger, now).model.clone()
    }

    /// The pairing term to place with at `now` (built with the model, from the same pods).
    pub fn pairing(&mut self, ledger: &Ledger, now: i64) -> Option<Arc<Pairing>> {
        self.built(ledger, now).pairing.clone()
    }

    fn built(&mut self, ledger: &Ledger, now: i64) -> &Built {
        let (seen, registrations) = (self.observed.seen(), self.registrations);
        let built = match self.built.take() {
            Some(b)
                if (b.seen == seen && b.registrations == registrations)
                    || now.saturating_sub(b.at) < REFRESH_SECS =>
            {
                b
            }
            _ => {
                let gpus = cluster_gpus(ledger);
                let model = Arc::new(self.observed.model(&gpus, self.cfg));
                let pairing = (self.cfg.pair != 0.0).then(|| {
                    Arc::new(Pairing {
                        weight: self.cfg.pair,
                        horizon: self.cfg.pair_horizon,
                        matching: self.cfg.pair_matching,
                        blend: self.cfg.pair_blend,
                        supply: Arc::new(self.observed.hole_supply(&gpus)),
                    })
                });
                tracing::debug!(
                    pods_seen = seen,
                    classes = model.workload().classes.len(),
                    "frag workload rebuilt"
                );
                Built {
                    model,
                    pairing,
                    at: now,
                    seen,
                    registrations,
                }
            }
        };
        self.built.insert(built)
    }

    /// What `/debug/frag-workload` shows: where M comes from, M's classes (GPU types by
    /// name), the per-type constants of the score and the heaviest observed shapes.
    pub fn view(&self, ledger: &Ledger) -> Value {
        let gpus = cluster_gpus(ledger);
        let table = ModelTable::of(&gpus);
        let model = self.observed.model(&gpus, self.cfg);
        let names = table.types();
        let name_of = |id: u8| {
            names
                .iter()
                .find(|(_, i)| *i == id)
                .map_or_else(|| "unknown".to_string(), |(n, _)| n.clone())
        };
        let classes: Vec<Value> = model
            .workload()
            .classes
            .iter()
            .map(|c| {
                let models: Value = if c.models.0 == 0 {
                    json!("any")
                } else {
                    (0..64u8)
                        .filter(|&i| c.models.0 & (1u64 << i) != 0)
                        .map(name_of)
                        .collect::<Vec<_>>()
                        .into()
                };
                json!({
                    "cpu_milli": c.cpu_milli,
                    "mem_mib": c.mem_mib,
                    "gpu_milli": c.gpu_milli,
                    "num_gpu": c.num_gpu,
                    "models": models,
                    "weight": c.weight,
                })
            })
            .collect();
        let types: Vec<Value> = names
            .iter()
            .map(|(name, id)| {
                let (count, mem) = gpus.types.get(name).copied().unwrap_or((0, 0));
                json!({
                    "type": name,
                    "gpus": count,
                    "mem_mib": mem,
                    "cpu_milli_per_milli_gpu": model.scoring().rho(*id),
                    "scarcity": model.scoring().scarcity(*id),
                })
            })
            .collect();
        let settings = self.observed.settings();
        let shapes: Vec<Value> = self
            .observed
            .shapes()
            .into_iter()
            .take(SHAPES_SHOWN)
            .map(|s| json!({"shape": s.key, "share": s.share, "mem_mib": s.mem_mib}))
            .collect();
        json!({
            "source": if self.observed.is_observed() { "observed" } else { "prior" },
            "pods_seen": self.observed.seen(),
            "min_pods": settings.min_pods,
            "half_life_pods": settings.half_life,
            "coverage_pct": settings.coverage_pct,
            "pairing": {
                "weight": self.cfg.pair,
                "horizon": self.cfg.pair_horizon,
                "blend": format!("{:?}", self.cfg.pair_blend).to_lowercase(),
            },
            "gpu_types": types,
            "classes": classes,
            "shapes": shapes,
        })
    }
}

/// The admin port's routes beyond `/livez`, `/readyz` and `/metrics`: `/debug/frag-workload`
/// (what [`SchedState::frag_view`] shows), then `rest` (the dashboard, with `--ui`).
pub fn admin_routes(state: Arc<Mutex<SchedState>>, rest: Option<Handler>) -> Handler {
    handler_fn(move |req| {
        let (state, rest) = (state.clone(), rest.clone());
        async move {
            match (req.uri().path(), rest) {
                ("/debug/frag-workload", _) => {
                    let view = state.lock_unpoisoned().frag_view();
                    respond::json(StatusCode::OK, &view)
                }
                (_, Some(rest)) => rest(req).await,
                (path, None) => respond::text(
                    StatusCode::NOT_FOUND,
                    format!(
                        "no route {path}; try /livez, /readyz, /metrics or /debug/frag-workload"
                    ),
                ),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hami_core::frag::observed::{ShapeKey, prior_workload};

    fn shape(cpu: i64) -> PodShape {
        PodShape {
            key: ShapeKey {
                cpu_milli: cpu,
                num_gpu: 1,
                cores: 30,
                mem_percent: Some(30),
                mem_mib: 0,
                types: None,
            },
            mem_mib: 512,
        }
    }

    #[test]
    fn the_model_follows_the_pods_at_most_every_refresh() {
        let ledger = Ledger::new();
        let mut live = LiveFrag::new(
            ObservedSettings {
                min_pods: 3,
                ..ObservedSettings::default()
            },
            FragScoreConfig::default(),
        );
        let first = live.model(&ledger, 1000);
        assert_eq!(first.workload(), &prior_workload());
        for _ in 0..3 {
            live.observe(&shape(2000));
        }
        // Within the refresh period the model stays; after it, M is the observed shape.
        assert_eq!(live.model(&ledger, 1010).id(), first.id());
        let next = live.model(&ledger, 1000 + REFRESH_SECS);
        assert_ne!(next.id(), first.id());
        assert_eq!(next.workload().classes.len(), 1);
        assert_eq!(next.workload().classes[0].cpu_milli, 2000);
        assert_eq!(next.workload().classes[0].gpu_milli, 300);
        // Nothing new: no rebuild however late.
        assert_eq!(live.model(&ledger, 99_999).id(), next.id());
        let view = live.view(&ledger);
        assert_eq!(view["source"], "observed");
        assert_eq!(view["pods_seen"], 3);
        assert_eq!(view["classes"][0]["gpu_milli"], 300);
        assert_eq!(view["classes"][0]["models"], "any");
        assert_eq!(view["pairing"]["weight"], FragScoreConfig::default().pair);
        assert_eq!(view["pairing"]["blend"], "delta");
    }

    /// The pairing term comes with the model, from the same pods: off at weight 0, else
    /// with the sharing pods seen as its demand.
    #[test]
    fn the_pairing_term_follows_the_pods_seen() {
        let ledger = Ledger::new();
        let off = FragScoreConfig {
            pair: 0.0,
            ..FragScoreConfig::default()
        };
        let mut live = LiveFrag::new(ObservedSettings::default(), off);
        live.observe(&shape(2000));
        assert!(live.pairing(&ledger, 1000).is_none());
        let on = FragScoreConfig {
            pair: 10.0,
            pair_horizon: 2.0,
            ..FragScoreConfig::default()
        };
        let mut live = LiveFrag::new(ObservedSettings::default(), on);
        let before = live.pairing(&ledger, 1000).expect("weight 10: on");
        assert_eq!((before.weight, before.horizon), (10.0, 2.0));
        assert_eq!(*before.supply, Default::default());
        live.observe(&shape(2000));
        let after = live.pairing(&ledger, 1000 + REFRESH_SECS).expect("on");
        // One 300-milli pod seen, horizon 2: two fillers for a lone 300 hole.
        let holes = hami_core::frag::pairing::FreeShares::of([300]);
        assert_eq!(after.supply.waste(&holes, after.horizon).gain(300, 0), 0.0);
    }
}
