//! Where a run's idle GPU sits at arrived = 100 % (`docs/simulator.md#our-policy-hami-frag`):
//! replays one seed of one policy, stops at the first arrival that brings the arrived GPU
//! request to the cluster's capacity, and classifies every GPU with free share by whether any
//! task shape of the trace could still use it.
//!
//! ```sh
//! cargo run --release -p hami-sim --example stranded -- \
//!   data/openb/openb_node_list_gpu_node.csv.gz data/openb/openb_pod_list_default.csv.gz hami-frag 42
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, bail};
use hami_sim::Experiment;
use hami_sim::cluster::Cluster;
use hami_sim::task::to_tasks;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [nodes, pods, policy, seed] = args.as_slice() else {
        bail!("usage: stranded NODES PODS POLICY SEED");
    };
    let seed: u64 = seed.parse().with_context(|| format!("seed {seed:?}"))?;
    let exp = Experiment::load(Path::new(nodes), Path::new(pods))?;
    let arr =
        hami_sim::arrivals::sample_arrivals(&exp.pods, exp.nodes.len(), exp.capacity(), 1.3, seed);
    let run = exp.run_arrivals(policy, seed, &arr.pods, &arr.ranks, 20)?;
    let (tasks, _) = to_tasks(&arr.pods);
    let mut cluster = Cluster::new(&exp.nodes, 20);
    // Shares held per GPU, to name what a hole sits next to.
    let mut held: Vec<Vec<Vec<i32>>> = exp
        .nodes
        .iter()
        .map(|n| vec![Vec::new(); usize::from(n.gpus)])
        .collect();
    for ((task, decision), event) in tasks
        .iter()
        .zip(&run.output.decisions)
        .zip(&run.output.events)
    {
        if let Some(p) = decision {
            cluster.apply(p.node, task, p.gpus);
            for (g, shares) in held[p.node].iter_mut().enumerate() {
                if p.gpus & (1 << g) != 0 {
                    shares.push(task.milli);
                }
            }
        }
        if event.arrived >= cluster.capacity {
            break;
        }
    }
    // The trace's GPU task shapes: (cpu, mem, num, milli, models).
    let (shapes, _) = to_tasks(&exp.pods);
    let mut kinds: Vec<_> = shapes.iter().filter(|t| t.num > 0).collect();
    kinds.sort_by_key(|t| t.type_id);
    kinds.dedup_by_key(|t| t.type_id);
    let (mut idle, mut by_kind, mut by_size, mut by_model) =
        (0i64, BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
    let mut sample_bound = Vec::new();
    for (n, node) in cluster.nodes.iter().enumerate() {
        for (g, &r) in node.gpus().iter().enumerate() {
            if r == 0 {
                continue;
            }
            idle += i64::from(r);
            let by_share = kinds
                .iter()
                .any(|t| t.num == 1 && t.milli <= r && t.models.allows(node.model));
            let whole = kinds.iter().any(|t| {
                t.milli <= r
                    && t.models.allows(node.model)
                    && t.cpu <= node.cpu_free
                    && t.mem <= node.mem_free
                    && node.gpus().iter().filter(|&&f| f >= t.milli).count() >= t.num as usize
            });
            let kind = match (by_share, whole) {
                (false, _) => "no task shape has a share this small",
                (true, false) => "a share fits, but no shape fits the node's CPU/memory",
                (true, true) => "some task shape fits (share, CPU, memory, model)",
            };
            *by_kind.entry(kind).or_insert(0i64) += i64::from(r);
            let mut holding = held[n][g].clone();
            holding.sort_unstable();
            *by_size.entry((r, format!("{holding:?}"))).or_insert(0i64) += 1;
            *by_model
                .entry(exp.models.name(node.model).to_string())
                .or_insert(0i64) += i64::from(r);
            if kind.starts_with("a share") && sample_bound.len() < 8 {
                sample_bound.push(format!(
                    "{} {} GPUs, {} free, cpu free {} milli, mem free {} MiB",
                    exp.models.name(node.model),
                    node.gpu_count,
                    r,
                    node.cpu_free,
                    node.mem_free
                ));
            }
        }
    }
    let pct = |m: i64| 100.0 * m as f64 / cluster.capacity as f64;
    println!(
        "{policy} seed {seed}: idle {:.2} GPUs = {:.2} % of capacity",
        idle as f64 / 1000.0,
        pct(idle)
    );
    for (k, m) in &by_kind {
        println!("  {k}: {:.2} GPUs ({:.2} %)", *m as f64 / 1000.0, pct(*m));
    }
    println!("by model:");
    for (k, m) in &by_model {
        println!("  {k}: {:.2} GPUs", *m as f64 / 1000.0);
    }
    let mut sizes: Vec<_> = by_size.into_iter().collect();
    sizes.sort_by_key(|((r, _), c)| std::cmp::Reverse(i64::from(*r) * c));
    println!("hole (free milli, shares held) × GPUs, largest idle first:");
    for ((r, holding), c) in sizes.iter().take(15) {
        println!("  {r:4} next to {holding}: {c}");
    }
    println!("CPU/memory-bound samples:");
    for s in &sample_bound {
        println!("  {s}");
    }
    Ok(())
}
