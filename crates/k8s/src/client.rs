//! Finding the API server: an explicit kubeconfig, else in-cluster config, else
//! `KUBECONFIG` / `~/.kube/config` (what `kube::Config::infer` does).

use std::path::{Path, PathBuf};

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// Why no client could be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot read kubeconfig {path}: {source}")]
    Kubeconfig {
        path: PathBuf,
        source: kube::config::KubeconfigError,
    },
    #[error(
        "no Kubernetes API server found: not running in a cluster and no usable KUBECONFIG ({0})"
    )]
    Infer(kube::config::InferConfigError),
    #[error("cannot build a Kubernetes client: {0}")]
    Build(kube::Error),
}

/// A client for `kubeconfig` when given, else found the standard way.
pub async fn connect(kubeconfig: Option<&Path>) -> Result<Client, ClientError> {
    client_for(config(kubeconfig).await?)
}

/// A client for `config`.
pub fn client_for(config: Config) -> Result<Client, ClientError> {
    Client::try_from(config).map_err(ClientError::Build)
}

/// Where [`connect`] connects: `kubeconfig` when given, else found the standard way.
pub async fn config(kubeconfig: Option<&Path>) -> Result<Config, ClientError> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path).map_err(|source| ClientError::Kubeconfig {
                path: path.to_path_buf(),
                source,
            })?;
            Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(|source| ClientError::Kubeconfig {
                    path: path.to_path_buf(),
                    source,
                })?
        }
        None => Config::infer().await.map_err(ClientError::Infer)?,
    };
    tracing::info!(api_server = %config.cluster_url, "using Kubernetes API server");
    Ok(config)
}
