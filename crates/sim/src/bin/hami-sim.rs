//! Standalone runner until `hamictl simulate` mounts the same arguments.

use clap::Parser;

#[derive(Debug, Parser)]
#[command(name = "hami-sim", about = "Trace-driven GPU scheduling simulator")]
struct Cli {
    #[command(flatten)]
    args: hami_sim::SimulateArgs,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let out = hami_sim::run_simulate(&cli.args)?;
    print!("{out}");
    Ok(())
}
