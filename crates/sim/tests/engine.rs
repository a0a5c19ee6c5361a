//! Policies driven by hami-core's placement engine against the simulator's own
//! implementations of the same policies.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers

use hami_sim::Experiment;
use hami_sim::arrivals::sample_arrivals;
use hami_sim::data::openb;

fn experiment() -> Experiment {
    Experiment::load(
        &openb("openb_node_list_gpu_node.csv.gz"),
        &openb("openb_pod_list_default.csv.gz"),
    )
    .expect("the openb trace under data/openb")
}

/// The first `n` arrivals of seed 42 (debug builds are slow; the prefix still fills
/// part of the cluster and exercises sharing, whole-GPU and CPU-only tasks).
fn prefix(exp: &Experiment, n: usize) -> (Vec<hami_sim::trace::PodRecord>, Vec<u32>) {
    let arr = sample_arrivals(&exp.pods, exp.nodes.len(), exp.capacity(), 1.3, 42);
    (arr.pods.into_iter().take(n).collect(), arr.ranks)
}

/// HAMi binpack in hami-core's engine makes exactly the simulator's decisions
/// (same formulas; node ties by rank = engine ties by name).
#[test]
fn engine_binpack_matches_native_decisions() {
    let exp = experiment();
    let (pods, ranks) = prefix(&exp, 3000);
    let native = exp
        .run_arrivals("hami-binpack", 42, &pods, &ranks, 20)
        .unwrap();
    let engine = exp
        .run_arrivals("engine-binpack", 42, &pods, &ranks, 20)
        .unwrap();
    // Same nodes and GPU counts; among equal GPUs HAMi's walk (from the end of a
    // stable sort) takes the highest index, the engine the lowest.
    let shape = |d: &Option<hami_sim::policy::Placement>| d.map(|p| (p.node, p.gpus.count_ones()));
    let differing = native
        .output
        .decisions
        .iter()
        .zip(&engine.output.decisions)
        .filter(|(a, b)| shape(a) != shape(b))
        .count();
    assert_eq!(differing, 0);
    assert_eq!(native.output.events, engine.output.events);
}

/// Spread agrees up to float ties (the engine scores in f32 like HAMi, the
/// simulator in f64): allocation stays within a fraction of a point.
#[test]
fn engine_spread_tracks_native() {
    let exp = experiment();
    let (pods, ranks) = prefix(&exp, 3000);
    let used = |policy: &str| {
        let run = exp.run_arrivals(policy, 42, &pods, &ranks, 20).unwrap();
        run.output.events.last().map_or(0, |e| e.used)
    };
    let (native, engine) = (used("hami-spread"), used("engine-spread"));
    let diff = (native - engine).abs() as f64 / exp.capacity() as f64;
    assert!(diff < 0.005, "native {native} vs engine {engine}");
}

/// The engine's frag policy places every task the cluster can take early on and
/// is deterministic run to run.
#[test]
fn engine_frag_is_deterministic() {
    let exp = experiment();
    let (pods, ranks) = prefix(&exp, 1500);
    let a = exp
        .run_arrivals("engine-frag", 42, &pods, &ranks, 20)
        .unwrap();
    let b = exp
        .run_arrivals("engine-frag", 42, &pods, &ranks, 20)
        .unwrap();
    assert_eq!(a.output.decisions, b.output.decisions);
    assert!(a.output.decisions.iter().all(Option::is_some));
}

/// The extender's `frag` (hami-core's engine reading each node's CPU, memory and GPU
/// model as the extender keeps them) makes exactly the decisions of the simulator's
/// `hami-frag`: same nodes, same GPUs, same curve.
#[test]
fn engine_frag_matches_hami_frag_decisions() {
    let exp = experiment();
    let (pods, ranks) = prefix(&exp, 3000);
    let native = exp
        .run_arrivals("hami-frag", 42, &pods, &ranks, 20)
        .unwrap();
    let engine = exp
        .run_arrivals("engine-frag", 42, &pods, &ranks, 20)
        .unwrap();
    assert_eq!(native.output.decisions, engine.output.decisions);
    assert_eq!(native.output.events, engine.output.events);
}

/// The same on a trace with GPU-model constraints (the model-scarcity term and ρ per
/// model read the nodes' device types).
#[test]
fn engine_frag_matches_hami_frag_with_model_constraints() {
    let exp = Experiment::load(
        &openb("openb_node_list_gpu_node.csv.gz"),
        &openb("openb_pod_list_gpuspec25.csv.gz"),
    )
    .expect("the openb trace under data/openb");
    let (pods, ranks) = prefix(&exp, 2000);
    let native = exp
        .run_arrivals("hami-frag", 43, &pods, &ranks, 20)
        .unwrap();
    let engine = exp
        .run_arrivals("engine-frag", 43, &pods, &ranks, 20)
        .unwrap();
    assert_eq!(native.output.decisions, engine.output.decisions);
}

/// With the supply-aware pairing term (the ledger's free-share histogram and the sharing
/// tasks seen, applied to the engine's node rank after the per-node score cache), in
/// either blend (added to Δ before FGD's quantisation, the default, or to the rank after
/// it), the engine still makes exactly `hami-frag`'s decisions, and the term does change
/// them.
#[test]
fn engine_frag_matches_hami_frag_with_the_pairing_term() {
    let exp = experiment();
    let (pods, ranks) = prefix(&exp, 3000);
    let run = |policy: &str| exp.run_arrivals(policy, 42, &pods, &ranks, 20).unwrap();
    let unpaired = run("hami-frag:pair=0");
    for tuning in [
        "pair=5,horizon=4,blend=delta",
        "pair=10,horizon=4,blend=rank",
    ] {
        let native = run(&format!("hami-frag:{tuning}"));
        let engine = run(&format!("engine-frag:{tuning}"));
        assert_eq!(native.output.decisions, engine.output.decisions, "{tuning}");
        assert_eq!(native.output.events, engine.output.events, "{tuning}");
        let changed = unpaired
            .output
            .decisions
            .iter()
            .zip(&native.output.decisions)
            .filter(|(a, b)| a != b)
            .count();
        assert!(
            changed > 0,
            "{tuning}: the pairing term changed no decision"
        );
    }
}
