#[tokio::main]
async fn main() -> anyhow::Result<()> {
    use hami_device_plugin_dcu::{cli, run};
    cli::BINARY
        .main::<cli::ServeArgs, cli::NodeArgs, _, _, _, _>(run::run, run::discover)
        .await
}
