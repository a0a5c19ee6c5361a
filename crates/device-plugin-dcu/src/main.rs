use anyhow::Context;
use clap::Parser;
use hami_device_plugin_dcu::cli::{Cli, Command};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Ignored when already installed.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    cli.log.init_tracing()?;
    match cli.command {
        None => {
            let shutdown = hami_server::shutdown::shutdown_on_signals();
            hami_device_plugin_dcu::run::run(cli.serve, shutdown)
                .await
                .context("hami-device-plugin-dcu failed")
        }
        Some(Command::Discover(args)) => {
            let report =
                hami_device_plugin_dcu::run::discover(&args).context("discovery failed")?;
            println!("{}", serde_json::to_string_pretty(&report)?);
            Ok(())
        }
    }
}
