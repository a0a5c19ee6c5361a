use anyhow::Context;
use clap::Parser;
use hami_scheduler::cli::Cli;

// /filter allocates and frees the candidate lists of large clusters on every call; glibc's
// allocator spent a quarter of the extender's CPU consolidating those frees.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Ignored when already installed.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    hami_server::trace::init_tracing(cli.log_format, cli.log_level.as_deref())?;
    let shutdown = hami_server::shutdown::shutdown_on_signals();
    hami_scheduler::run::run(cli, shutdown)
        .await
        .context("hami-scheduler failed")
}
