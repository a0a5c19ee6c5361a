use anyhow::Context;
use clap::Parser;
use hami_scheduler::cli::Cli;

// /filter allocates and frees the candidate lists of large clusters on every call; glibc's
// allocator spent a quarter of the extender's CPU consolidating those frees.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    // Ignored when already installed.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    cli.log.init_tracing()?;
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let pick = |asked: usize, cap: usize| if asked == 0 { cpus.min(cap) } else { asked };
    rayon::ThreadPoolBuilder::new()
        .num_threads(pick(cli.placement_threads, 8))
        .thread_name(|i| format!("placement-{i}"))
        .build_global()
        .context("starting the placement threads")?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(pick(cli.worker_threads, 2))
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let shutdown = hami_server::shutdown::shutdown_on_signals();
        hami_scheduler::run::run(cli, shutdown)
            .await
            .context("hami-scheduler failed")
    })
}
