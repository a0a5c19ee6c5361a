use std::io::Write;

use anyhow::Context;
use clap::Parser;
use hami_testkit::emulator::{Cli, run};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    cli.log.init_tracing()?;
    let shutdown = hami_server::shutdown::shutdown_on_signals();
    run(cli, shutdown, |url| {
        // The URL alone on stdout, so scripts can read it.
        let mut out = std::io::stdout();
        let _ = writeln!(out, "{url}");
        let _ = out.flush();
    })
    .await
    .context("kube-emulator failed")
}
