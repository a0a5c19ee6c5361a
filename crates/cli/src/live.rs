//! A live cluster, read through the API server with the services' client setup
//! (`--kubeconfig`, else in-cluster config, else `KUBECONFIG` / `~/.kube/config`).

use std::future::Future;

use anyhow::Context;
use hami_server::args::ClientArgs;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, ListParams};

/// Runs `f` to completion on a runtime of this thread (hamictl is a one-shot command).
pub fn block_on<F: Future>(f: F) -> anyhow::Result<F::Output> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    Ok(rt.block_on(f))
}

/// A client for the cluster the flags name.
pub async fn connect(args: &ClientArgs) -> anyhow::Result<Client> {
    // HTTPS API servers: rustls needs a process-wide crypto provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    Ok(hami_k8s::client::connect(args.kubeconfig.as_deref()).await?)
}

/// Every node and every pod, as `kubectl get nodes,pods -A` lists them.
pub async fn nodes_and_pods(client: &Client) -> anyhow::Result<(Vec<Node>, Vec<Pod>)> {
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("cannot list nodes")?
        .items;
    let pods = Api::<Pod>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("cannot list pods")?
        .items;
    Ok((nodes, pods))
}

/// The pod `namespace/name`; not finding it is an error naming it.
pub async fn pod(client: &Client, namespace: &str, name: &str) -> anyhow::Result<Pod> {
    Api::<Pod>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .with_context(|| format!("cannot read pod {namespace}/{name}"))?
        .with_context(|| format!("pod {namespace}/{name} not found"))
}
