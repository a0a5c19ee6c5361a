//! Policy scoring on hand-made nodes (`docs/simulator.md#method`,
//! `docs/protocol.md#scores`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers

use hami_sim::Task;
use hami_sim::cluster::{Cluster, NodeState, best_fit_gpus};
use hami_sim::frag::{FragMemo, ModelSet, TaskClass, TypicalWorkload};
use hami_sim::policy::*;
use hami_sim::trace::NodeRecord;

fn node(gpus: &[i32], cpu_free: i64) -> NodeState {
    let rec = NodeRecord {
        name: "n".into(),
        cpu_milli: 96_000,
        memory_mib: 1 << 20,
        gpus: gpus.len() as u8,
        model: 0,
    };
    let mut n = NodeState::new(&rec);
    n.cpu_free = cpu_free;
    n.gpu_free[..gpus.len()].copy_from_slice(gpus);
    n
}

fn task(cpu: i64, num: u32, milli: i32) -> Task {
    Task {
        cpu,
        mem: 0,
        num,
        milli,
        models: ModelSet::ANY,
        type_id: 0,
    }
}

#[test]
fn dotprod_prefers_smaller_product() {
    let t = task(8000, 1, 500);
    let full = node(&[1000; 8], 96_000);
    let busy = node(&[500, 0, 0, 0, 0, 0, 0, 0], 16_000);
    // full: v=(0.75,1), u=(0.0625,0.0625): dot = 0.109375 → ⌊100·(1−0.0546875)⌋ = 94.
    assert_eq!(dotprod_score(&full, &t), 94);
    assert!(dotprod_score(&busy, &t) > dotprod_score(&full, &t));
}

#[test]
fn bestfit_raw_formula() {
    let t = task(16_000, 1, 1000);
    let n = node(&[1000, 1000], 32_000);
    // 1 − (0.5·16000/128000 + 0.5·1000/8000) = 1 − 0.125 = 0.875 → 87.
    assert_eq!(bestfit_raw(&n, &t), 87);
}

#[test]
fn bestfit_normalisation_creates_ties_broken_by_rank() {
    // Raw scores 0, 87 and 88 → normalised 0, 98, 100: the top two differ;
    // with a range of 300 integer division would collapse neighbours.
    let recs: Vec<NodeRecord> = (0..3)
        .map(|i| NodeRecord {
            name: format!("n{i}"),
            cpu_milli: 128_000,
            memory_mib: 1 << 20,
            gpus: 8,
            model: 0,
        })
        .collect();
    let mut cluster = Cluster::new(&recs, 20);
    cluster.nodes[1].gpu_free = [0, 0, 0, 0, 0, 0, 1000, 1000];
    cluster.nodes[1].cpu_free = 16_000;
    cluster.nodes[2].gpu_free = [0, 0, 0, 0, 0, 0, 1000, 1000];
    cluster.nodes[2].cpu_free = 16_000;
    let t = task(1000, 1, 1000);
    let mut p = BestFit::default();
    // Nodes 1 and 2 tie; rank decides.
    let got = p
        .place(&cluster, &[2, 1, 0], &t, &[0, 1, 2])
        .map(|p| p.node);
    assert_eq!(got, Some(2));
    let got = p
        .place(&cluster, &[2, 0, 1], &t, &[0, 1, 2])
        .map(|p| p.node);
    assert_eq!(got, Some(1));
}

#[test]
fn packing_preference_order() {
    let share = task(1000, 1, 300);
    let idle8 = node(&[1000; 8], 96_000);
    let idle2 = node(&[1000; 2], 96_000);
    let used_free_gpu = node(&[0, 1000], 96_000);
    let shared = node(&[400, 1000], 96_000);
    assert_eq!(packing_score(&idle8, &share, 20), 25); // max(33−8, 8)
    assert_eq!(packing_score(&idle2, &share, 20), 31); // smaller idle node first
    assert_eq!(packing_score(&used_free_gpu, &share, 20), 49); // max(50−1, 33)
    assert_eq!(packing_score(&shared, &share, 20), 96); // 100 − ⌊40/10⌋
    assert_eq!(packing_score(&shared, &task(1000, 0, 0), 20), 0);
}

#[test]
fn clustering_tags() {
    let share = task(1000, 1, 300);
    let whole = task(1000, 1, 1000);
    let mut n = node(&[1000; 8], 96_000);
    assert_eq!(clustering_score(&n, &share), 25);
    n.tags = hami_sim::cluster::cluster_tag(&share);
    n.gpu_free[0] = 700;
    assert_eq!(clustering_score(&n, &share), 75); // ⌊25·300/8000⌋ = 0
    assert_eq!(clustering_score(&n, &whole), 0);
    n.tags |= hami_sim::cluster::cluster_tag(&whole);
    assert_eq!(clustering_score(&n, &share), 50);
    assert_eq!(clustering_score(&n, &task(1000, 0, 0)), 0);
}

#[test]
fn best_fit_gpu_choice() {
    let n = node(&[1000, 600, 400, 600], 96_000);
    assert_eq!(best_fit_gpus(&n, &task(1000, 1, 500), 20), 1 << 1); // tightest, lowest index
    assert_eq!(best_fit_gpus(&n, &task(1000, 1, 300), 20), 1 << 2);
    assert_eq!(best_fit_gpus(&n, &task(1000, 1, 1000), 20), 1 << 0);
    assert_eq!(best_fit_gpus(&n, &task(1000, 0, 0), 20), 0);
}

fn workload() -> TypicalWorkload {
    TypicalWorkload {
        classes: vec![
            TaskClass {
                cpu_milli: 4000,
                mem_mib: 0,
                gpu_milli: 500,
                num_gpu: 1,
                models: ModelSet::ANY,
                weight: 0.5,
            },
            TaskClass {
                cpu_milli: 4000,
                mem_mib: 0,
                gpu_milli: 1000,
                num_gpu: 1,
                models: ModelSet::ANY,
                weight: 0.5,
            },
        ],
    }
}

#[test]
fn fgd_picks_gpu_that_keeps_whole_gpus() {
    let w = workload();
    let mut memo = FragMemo::new(false);
    // Placing 500 on the half-used GPU 1 leaves GPU 0 whole: Δ = +250 → 56;
    // GPU 0 would leave 500 + 500 → F rises.
    let n = node(&[1000, 500], 96_000);
    let (score, gpu) = fgd_node_score(&n, &task(1000, 1, 500), 20, &w, &mut memo);
    assert_eq!(gpu, Some(1));
    assert_eq!(score, Some(56.0));
    // Equal GPUs: the first index wins.
    let n = node(&[1000, 1000], 96_000);
    assert_eq!(
        fgd_node_score(&n, &task(1000, 1, 300), 20, &w, &mut memo).1,
        Some(0)
    );
}

#[test]
fn hami_binpack_and_spread() {
    let busy = node(&[500, 1000], 96_000);
    let idle = node(&[1000, 1000], 96_000);
    assert!(hami_node_score(&busy, 20) > hami_node_score(&idle, 20));
    let mut n = node(&[1000, 500, 700], 96_000);
    n.gpu_tasks = [0, 1, 1, 0, 0, 0, 0, 0];
    let t = task(1000, 1, 300);
    assert_eq!(hami_gpus(&n, &t, 20, HamiMode::Binpack), 1 << 1); // fullest that fits
    assert_eq!(hami_gpus(&n, &t, 20, HamiMode::Spread), 1 << 0); // emptiest
    // Slot cap: GPU 1 is full at 1 slot.
    assert_eq!(hami_gpus(&n, &t, 1, HamiMode::Binpack), 1 << 0);
}

/// Two empty nodes `n0`, `n1` of 96 vCPU with `gpus` GPUs each.
fn two_nodes(gpus: u8) -> Cluster {
    let recs: Vec<NodeRecord> = (0..2)
        .map(|i| NodeRecord {
            name: format!("n{i}"),
            cpu_milli: 96_000,
            memory_mib: 1 << 20,
            gpus,
            model: 0,
        })
        .collect();
    Cluster::new(&recs, 20)
}

#[test]
fn hami_frag_uses_cpu_stranding() {
    // Two identical-GPU nodes; the CPU-poor one would strand its GPUs if it
    // took a CPU-heavy task, so our policy picks the CPU-rich node.
    let mut cluster = two_nodes(8);
    cluster.nodes[0].cpu_free = 40_000;
    let w = workload();
    let pods = [];
    let init = PolicyInit {
        workload: &w,
        pods: &pods,
        n_nodes: 2,
        gpus_per_model: &[],
        n_types: 1,
        seed: 1,
    };
    let mut p = make_policy("hami-frag", &init).unwrap();
    let got = p
        .place(&cluster, &[0, 1], &task(24_000, 1, 500), &[0, 1])
        .map(|p| p.node);
    assert_eq!(got, Some(1));
}

#[test]
fn hami_frag_pairing_leaves_the_hole_that_seen_demand_can_fill() {
    // Two one-GPU nodes with 550 and 600 milli free. A 50-milli task scores the same on both
    // (F falls by 25 either way), so the rank picks the 550 node, leaving a 500 hole. With the
    // pairing term, after a 520-milli task has been seen, the policy leaves a 550 hole instead,
    // which that kind of task can fill.
    let mut cluster = two_nodes(1);
    cluster.nodes[0].gpu_free[0] = 550;
    cluster.nodes[1].gpu_free[0] = 600;
    let w = workload();
    let init = PolicyInit {
        workload: &w,
        pods: &[],
        n_nodes: 2,
        gpus_per_model: &[],
        n_types: 2,
        seed: 1,
    };
    let mut small = task(1000, 1, 50);
    small.type_id = 1;
    let place = |name: &str| {
        let mut p = make_policy(name, &init).unwrap();
        p.place(&cluster, &[0, 1], &task(1000, 1, 520), &[0, 1]);
        p.place(&cluster, &[0, 1], &small, &[0, 1])
            .map(|p| (p.node, p.gpus))
    };
    assert_eq!(place("hami-frag"), Some((0, 1)));
    assert_eq!(place("hami-frag:pair=10,horizon=0.5"), Some((1, 1)));
}

#[test]
fn unknown_policy_is_an_error() {
    let w = workload();
    let init = PolicyInit {
        workload: &w,
        pods: &[],
        n_nodes: 1,
        gpus_per_model: &[],
        n_types: 1,
        seed: 1,
    };
    assert!(make_policy("nope", &init).is_err());
    assert!(make_policy("hami-frag:strand=x", &init).is_err());
    assert!(make_policy("hami-frag:strand=0.5,mem=0", &init).is_ok());
}
