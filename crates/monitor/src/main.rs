use anyhow::Context;
use clap::Parser;
use hami_vgpu_monitor::cli::Cli;

fn main() -> anyhow::Result<()> {
    // Ignored when already installed.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    cli.log.init_tracing()?;
    hami_vgpu_monitor::run::raise_open_file_limit();
    // One thread for the watch, the timers and /metrics; scans and feedback rounds run on
    // a small blocking pool. A node agent should stay small.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .max_blocking_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let shutdown = hami_server::shutdown::shutdown_on_signals();
        hami_vgpu_monitor::run::run(cli, shutdown)
            .await
            .context("hami-vgpu-monitor failed")
    })
}
