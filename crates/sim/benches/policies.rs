//! Wall time of one run (seed 42, default trace) per policy.
//! `cargo bench -p hami-sim` (release profile).

use std::time::Instant;

use hami_sim::data::openb;

fn main() -> anyhow::Result<()> {
    let nodes = openb("openb_node_list_gpu_node.csv.gz");
    let pods = openb("openb_pod_list_default.csv.gz");
    let exp = hami_sim::Experiment::load(&nodes, &pods)?;
    println!("{:<14} {:>10} {:>14}", "policy", "wall ms", "unalloc@100 %");
    for policy in hami_sim::policy::POLICY_NAMES {
        let t = Instant::now();
        let run = exp.run_seed(policy, 42, 1.3, 20)?;
        println!(
            "{:<14} {:>10.1} {:>14.2}",
            policy,
            t.elapsed().as_secs_f64() * 1000.0,
            run.curve.unalloc_at(100)
        );
    }
    Ok(())
}
