use anyhow::Context;
use clap::Parser;
use hami_webhook::cli::{Cli, Command};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Ignored when already installed.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    cli.log.init_tracing()?;
    match cli.command {
        None => {
            let shutdown = hami_server::shutdown::shutdown_on_signals();
            hami_webhook::run::run(cli.serve, shutdown)
                .await
                .context("hami-webhook failed")
        }
        Some(Command::Certgen(args)) => hami_webhook::certgen::run(args)
            .await
            .map(|_| ())
            .context("certgen failed"),
    }
}
