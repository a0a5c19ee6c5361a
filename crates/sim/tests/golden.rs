//! Exact replay against the paper simulator's seed-42 decisions
//! (`data/fgd-golden`, `docs/simulator.md#validation-against-the-papers-simulator`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers

use hami_sim::data::{fgd_golden, openb};
use hami_sim::policy::Placement;
use hami_sim::trace::{PodRecord, load_decisions};
use hami_sim::{Experiment, SeedRun};

/// The default trace with the golden seed-42 arrival order and node ranks.
fn golden_default() -> (Experiment, Vec<PodRecord>, Vec<u32>) {
    let mut exp = Experiment::load(
        &openb("openb_node_list_gpu_node.csv.gz"),
        &openb("openb_pod_list_default.csv.gz"),
    )
    .unwrap();
    let (pods, ranks) = exp
        .load_replay(
            &fgd_golden("seed42_arrivals.csv.gz"),
            &fgd_golden("seed42_node_rank.csv.gz"),
        )
        .unwrap();
    (exp, pods, ranks)
}

fn replay(policy: &str) -> (Experiment, SeedRun) {
    let (exp, pods, ranks) = golden_default();
    assert_eq!(pods.len(), 10_866);
    let run = exp.run_arrivals(policy, 42, &pods, &ranks, 20).unwrap();
    (exp, run)
}

fn final_alloc(run: &SeedRun) -> f64 {
    run.curve.alloc[130]
}

fn check_decisions(policy: &str, file: &str) {
    let (exp, run) = replay(policy);
    let golden = load_decisions(&fgd_golden(file)).unwrap();
    assert_eq!(golden.len(), run.output.decisions.len());
    let mut matched = 0usize;
    let mut first_mismatch = None;
    for (i, (got, (node, gpus))) in run.output.decisions.iter().zip(&golden).enumerate() {
        let got_node = got.map(|p: Placement| exp.nodes[p.node].name.clone());
        let got_gpus: Vec<u8> = got.map_or(Vec::new(), |p| {
            (0..8).filter(|g| p.gpus & (1 << g) != 0).collect()
        });
        if got_node == *node && got_gpus == *gpus {
            matched += 1;
        } else if first_mismatch.is_none() {
            first_mismatch = Some((i, got_node, got_gpus, node.clone(), gpus.clone()));
        }
    }
    assert_eq!(
        matched,
        golden.len(),
        "{policy}: {matched} matched; first mismatch {first_mismatch:?}"
    );
}

/// The seeded stream (Go's `math/rand`, `docs/simulator.md#arrival-stream`) is the original's: with
/// seed 42 it yields the golden arrival order (resampled copies named `-tuned-N` there) and ranks.
#[test]
fn seed42_stream_is_the_golden_stream() {
    let (exp, golden_pods, golden_ranks) = golden_default();
    let sampled =
        hami_sim::arrivals::sample_arrivals(&exp.pods, exp.nodes.len(), exp.capacity(), 1.3, 42);
    assert_eq!(sampled.pods.len(), golden_pods.len());
    for (i, (got, want)) in sampled.pods.iter().zip(&golden_pods).enumerate() {
        let base = want.name.split("-tuned-").next().unwrap();
        assert_eq!(
            (got.name.as_str(), got.cpu_milli, got.num_gpu, got.gpu_milli),
            (base, want.cpu_milli, want.num_gpu, want.gpu_milli),
            "arrival {i}"
        );
    }
    assert_eq!(sampled.ranks, golden_ranks);
}

#[test]
fn fgd_matches_every_golden_decision() {
    check_decisions("fgd", "seed42_decisions_fgd.csv.gz");
}

#[test]
fn bestfit_matches_every_golden_decision() {
    check_decisions("bestfit", "seed42_decisions_bestfit.csv.gz");
}

#[test]
fn deterministic_baselines_match_published_seed42() {
    for (policy, expected) in [
        ("dotprod", 90.54),
        ("packing", 91.57),
        ("clustering", 91.53),
    ] {
        let (_, run) = replay(policy);
        assert_eq!(final_alloc(&run), expected, "{policy} final allocation");
    }
}

#[test]
fn fgd_and_bestfit_curves_match_published_seed42() {
    let (_, fgd) = replay("fgd");
    assert_eq!(
        [
            fgd.curve.alloc[90],
            fgd.curve.alloc[95],
            fgd.curve.alloc[100],
            fgd.curve.alloc[130]
        ],
        [89.98, 94.92, 95.14, 95.29]
    );
    assert_eq!(
        [
            fgd.curve.frag_amount[90],
            fgd.curve.frag_amount[95],
            fgd.curve.frag_amount[100]
        ],
        [4.97, 4.72, 4.83]
    );
    let (_, bf) = replay("bestfit");
    assert_eq!(
        [
            bf.curve.alloc[90],
            bf.curve.alloc[95],
            bf.curve.alloc[100],
            bf.curve.alloc[130]
        ],
        [89.98, 92.87, 92.94, 93.13]
    );
}
