//! Reruns every policy on every openb variant and rewrites the result tables of
//! `docs/simulator.md` and its SVG (`hami_sim::tables`); `cargo xtask sim-tables` runs it
//! in a release build.

use std::path::PathBuf;

use clap::Parser;

#[derive(Debug, Parser)]
#[command(
    name = "sim-tables",
    about = "Rewrite the simulator's result tables (docs/simulator.md) and curve plot"
)]
struct Cli {
    /// The page whose generated section is rewritten.
    #[arg(long, default_value = "docs/simulator.md")]
    doc: PathBuf,
    /// The default trace's curve plot.
    #[arg(long, default_value = "docs/simulator-default.svg")]
    svg: PathBuf,
    /// Seeds: `A..B` (inclusive) or a comma list.
    #[arg(long, default_value = "42..51")]
    seeds: String,
    /// Worker threads (0: all cores).
    #[arg(long, default_value_t = 0)]
    threads: usize,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let seeds = hami_sim::cli::parse_seeds(&cli.seeds)?;
    let started = std::time::Instant::now();
    hami_sim::tables::regenerate(
        &cli.doc,
        &cli.svg,
        &seeds,
        cli.threads,
        |variant, policy| {
            eprintln!(
                "[{:>6.0} s] {variant:<12} {policy}",
                started.elapsed().as_secs_f64()
            );
        },
    )?;
    eprintln!(
        "wrote {} and {} in {:.0} s",
        cli.doc.display(),
        cli.svg.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
