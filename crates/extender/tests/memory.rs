//! What the extender's state costs in heap at the bench's large cluster (5,000 nodes × 8
//! GPUs, 50,000 running pods; `cargo xtask bench`'s `5000x8-50k`), structure by
//! structure: the resident memory each adds to a fresh process (`/proc/self/statm`
//! before and after building it, with the extender's allocator), so the breakdown in
//! `docs/extender.md#memory` is measured, and budgets make a regression fail here
//! rather than only in the bench. Each part runs in a child process of its own (memory
//! freed by one part would be reused by the next and hide it).
//! `cargo test --release -p hami-scheduler --test memory -- --nocapture` prints the table.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashSet;
use std::process::Command;
use std::sync::Arc;

use hami_core::config::DeviceConfig;
use hami_core::ledger::{Ledger, NodeInventory, PodRecord};
use hami_core::vendor::{NodeView, VendorRegistry};
use hami_scheduler::slim::WatchedPod;
use hami_scheduler::state::SchedState;
use hami_testkit::scale::{ScaleCluster, node_name};
use k8s_openapi::api::core::v1::{Node, Pod};

// The extender's allocator: what it keeps resident is what the process keeps.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Resident bytes of this process.
fn resident() -> isize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: isize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

const CLUSTER: ScaleCluster = ScaleCluster {
    nodes: 5_000,
    gpus_per_node: 8,
};
const PODS: usize = 50_000;
const NOW: i64 = 1_795_000_100;

fn node(i: usize) -> Node {
    let mut n: Node = serde_json::from_value(CLUSTER.node(i)).unwrap();
    n.metadata.uid = Some(format!("6a1f0c2e-0000-4000-8000-{i:012}"));
    n
}

fn pod_uid(i: usize) -> String {
    format!("0f3b5d7e-1111-4222-8333-{i:012}")
}

/// Running pod `i` as the pod watch delivers it (slimmed).
fn pod(i: usize) -> Pod {
    let mut p: WatchedPod = serde_json::from_value(CLUSTER.running_pod(i)).unwrap();
    p.metadata.uid = Some(pod_uid(i));
    p.into_pod()
}

fn mib(bytes: isize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// Heap of the ledger alone (what placement reads), nodes then pods.
fn ledger_alone(registry: &VendorRegistry) -> (isize, isize, Ledger) {
    let start = resident();
    let mut ledger = Ledger::new();
    for i in 0..CLUSTER.nodes {
        let n = node(i);
        let (inv, _) = NodeInventory::from_node(&NodeView::of(&n), registry);
        ledger.set_node(&node_name(i), Arc::new(inv));
    }
    let nodes = resident() - start;
    for i in 0..PODS {
        let record = PodRecord::from_pod(&pod(i), registry).unwrap().unwrap();
        ledger.apply_pod(record);
    }
    (nodes, resident() - start - nodes, ledger)
}

/// Heap of the whole state the watches feed, nodes then pods.
fn state(registry: &VendorRegistry) -> (isize, isize, SchedState) {
    let start = resident();
    let mut st = SchedState::new(registry.clone(), 120);
    for i in 0..CLUSTER.nodes {
        st.apply_node(&node(i));
    }
    let nodes = resident() - start;
    for i in 0..PODS {
        st.apply_pod(&pod(i), NOW);
    }
    (nodes, resident() - start - nodes, st)
}

/// Builds one part in this process and prints what it added, for [`breakdown`].
#[test]
#[ignore = "run by state_of_5000_nodes_and_50000_pods_fits_its_budget in a child process"]
fn measure_part() {
    let Ok(part) = std::env::var(PART_VAR) else {
        return;
    };
    let registry = VendorRegistry::from_config(&DeviceConfig::default());
    // Warm the allocator and the generators up so their first use does not count.
    drop((node(0), pod(0)));
    let (nodes, pods) = match part.as_str() {
        "ledger" => {
            let (n, p, ledger) = ledger_alone(&registry);
            assert_eq!(ledger.pod_count(), PODS);
            (n, p)
        }
        "state" => {
            let (n, p, st) = state(&registry);
            assert_eq!(st.ledger().pod_count(), PODS);
            assert_eq!(st.counted_pods(), PODS);
            (n, p)
        }
        // The pod watch's set of the UIDs a relist showed, as strings (an earlier
        // round's way): alive at the moment the cache syncs.
        "relist-strings" => {
            let start = resident();
            let listed: HashSet<String> = (0..PODS).map(pod_uid).collect();
            assert_eq!(listed.len(), PODS);
            (0, resident() - start)
        }
        // What a whole relist of the 50,000 pods adds to the state, as the pod watch
        // runs it now (the state marks the pods it is shown).
        "relist" => {
            let (_, _, mut st) = state(&registry);
            let start = resident();
            st.begin_pod_relist();
            for i in 0..PODS {
                st.apply_pod(&pod(i), NOW);
            }
            st.retain_pods();
            assert_eq!(st.ledger().pod_count(), PODS);
            assert_eq!(st.counted_pods(), PODS);
            (0, resident() - start)
        }
        other => panic!("unknown part {other}"),
    };
    println!("MEASURED {part} {nodes} {pods}");
}

const PART_VAR: &str = "HAMI_MEMORY_PART";

/// (bytes for the nodes, bytes for the pods) of one part, measured in a child process.
fn measured(part: &str) -> (isize, isize) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "measure_part",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(PART_VAR, part)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| {
            l.split_once(&format!("MEASURED {part} "))
                .map(|(_, rest)| rest)
        })
        .unwrap_or_else(|| {
            panic!(
                "no measurement from the child: {stdout} {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let mut numbers = line.split_whitespace().map(|n| n.parse::<isize>().unwrap());
    (numbers.next().unwrap(), numbers.next().unwrap())
}

#[test]
fn state_of_5000_nodes_and_50000_pods_fits_its_budget() {
    let (ledger_nodes, ledger_pods) = measured("ledger");
    let (state_nodes, state_pods) = measured("state");
    let per_node = |b: isize| b / CLUSTER.nodes as isize;
    let per_pod = |b: isize| b / PODS as isize;
    println!("resident memory of the extender's state, 5,000 nodes x 8 GPUs, 50,000 running pods:");
    println!("| part | MiB | bytes each |");
    println!("|---|---|---|");
    let row = |what: &str, bytes: isize, each: isize| {
        println!("| {what} | {:.1} | {each} |", mib(bytes));
    };
    row(
        "ledger: nodes (inventory, usage)",
        ledger_nodes,
        per_node(ledger_nodes),
    );
    row("ledger: pod records", ledger_pods, per_pod(ledger_pods));
    row(
        "beside the ledger: nodes",
        state_nodes - ledger_nodes,
        per_node(state_nodes - ledger_nodes),
    );
    row(
        "beside the ledger: pods",
        state_pods - ledger_pods,
        per_pod(state_pods - ledger_pods),
    );
    row("total", state_nodes + state_pods, 0);
    let (_, relist_strings) = measured("relist-strings");
    let (_, relist) = measured("relist");
    row(
        "relist's set of listed UIDs, as strings (before)",
        relist_strings,
        per_pod(relist_strings),
    );
    row("a whole relist, now", relist, per_pod(relist));
    // Budgets with some room over what this code measures; a regression past them is
    // worth a look before it reaches the bench's RSS.
    assert!(
        per_node(state_nodes) < 3_700,
        "{} bytes per node",
        per_node(state_nodes)
    );
    assert!(
        relist * 3 < relist_strings * 2,
        "a relist: {relist} bytes, the set of its UIDs as strings {relist_strings}"
    );
    assert!(
        per_pod(state_pods) < 440,
        "{} bytes per pod",
        per_pod(state_pods)
    );
}
