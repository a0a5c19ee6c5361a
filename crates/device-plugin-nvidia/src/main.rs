use clap::Parser;
use hami_device_plugin::vendor_args::{Invocation, run_command};
use hami_device_plugin_nvidia::cli::{Cli, Command};
use hami_device_plugin_nvidia::{discover, run};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let invocation = match cli.command {
        None => Invocation::Serve(cli.serve),
        Some(Command::Discover(args)) => Invocation::Discover(args),
    };
    run_command(
        run::BINARY,
        &cli.log,
        invocation,
        run::run,
        discover::discover,
    )
    .await
}
