//! `kube-emulator`: the API server emulator as a standalone process, for use by
//! hand, by the demo and by scripts (with the real kubectl). The binary only parses
//! flags and calls [`run`].

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::Parser;
use hami_server::CancellationToken;
use hami_server::args::LogArgs;
use serde_json::Value;

use crate::http::{ApiServer, Options};
use crate::resources;
use crate::status::ApiError;
use crate::store::{GraceExpiry, Store};

/// Command line of `kube-emulator`.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "kube-emulator",
    version,
    about = "A Kubernetes API server emulator for tests, demos and scripts",
    long_about = "A Kubernetes API server emulator for tests, demos and scripts.\n\n\
        Serves core/v1 pods (with the binding and status subresources), nodes, events, \
        namespaces, resourcequotas, secrets, configmaps, services and serviceaccounts, \
        coordination.k8s.io/v1 leases and admissionregistration.k8s.io/v1 \
        mutatingwebhookconfigurations over plain HTTP, with discovery (legacy and \
        aggregated), server-side tables, watches, label/field selectors, the three patch \
        types and optimistic concurrency, so that the real kubectl and client libraries \
        work against it unchanged. Creates go through mutating admission webhooks \
        (MutatingWebhookConfigurations) over HTTPS like kube-apiserver's. State lives in \
        memory and is lost on exit.\n\n\
        Prints the URL it serves on as the first line of standard output; logs go to \
        standard error. Stops cleanly on SIGTERM or Ctrl-C.\n\n\
        Example:\n  kube-emulator --load cluster.yaml --kubeconfig-out /tmp/kubeconfig\n  \
        kubectl --kubeconfig /tmp/kubeconfig get nodes"
)]
pub struct Cli {
    /// Address to listen on; port 0 picks a free port (the URL is printed).
    #[arg(long, env = "KUBE_EMULATOR_LISTEN", default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,

    /// File of objects to create at start: YAML (one or many `---` documents) or
    /// JSON, single objects or `kind: List`. Repeatable; in the environment, a
    /// comma-separated list. Namespaces are created first.
    #[arg(long = "load", env = "KUBE_EMULATOR_LOAD", value_delimiter = ',')]
    pub load: Vec<PathBuf>,

    /// Write a kubeconfig (cluster, user and context named `kube-emulator`)
    /// pointing at the emulator to this file.
    #[arg(long, env = "KUBE_EMULATOR_KUBECONFIG_OUT")]
    pub kubeconfig_out: Option<PathBuf>,

    /// Where a Service port that admission webhooks reference
    /// (`clientConfig.service`) is served, as `NAMESPACE/NAME:PORT=HOST:PORT`
    /// (e.g. `kube-system/hami-webhook:443=127.0.0.1:9443`); there is no cluster DNS.
    /// Repeatable; in the environment, comma-separated.
    #[arg(long = "service-endpoint", env = "KUBE_EMULATOR_SERVICE_ENDPOINTS", value_delimiter = ',', value_parser = parse_service_endpoint)]
    pub service_endpoints: Vec<ServiceEndpoint>,

    /// How fast graceful deletions of bound pods finish without a kubelet: the grace
    /// period is multiplied by this (1 = real time, 0 = at once). Negative: never
    /// (only a delete with --grace-period=0 removes them).
    #[arg(
        long,
        env = "KUBE_EMULATOR_GRACE_SCALE",
        default_value_t = 1.0,
        allow_negative_numbers = true
    )]
    pub grace_scale: f64,

    #[command(flatten)]
    pub log: LogArgs,
}

/// A `--service-endpoint`: a Service port and the local address serving it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceEndpoint {
    pub namespace: String,
    pub name: String,
    pub port: u16,
    pub addr: SocketAddr,
}

/// Parses `NAMESPACE/NAME:PORT=HOST:PORT`.
pub fn parse_service_endpoint(s: &str) -> Result<ServiceEndpoint, String> {
    let shape = || format!("{s:?} is not NAMESPACE/NAME:PORT=HOST:PORT");
    let (service, addr) = s.split_once('=').ok_or_else(shape)?;
    let (ns, rest) = service.trim().split_once('/').ok_or_else(shape)?;
    let (name, port) = rest.rsplit_once(':').ok_or_else(shape)?;
    if ns.is_empty() || name.is_empty() {
        return Err(shape());
    }
    let port = port
        .parse()
        .map_err(|_| format!("{s:?}: service port {port:?} is not a port number"))?;
    let addr = addr
        .trim()
        .parse()
        .map_err(|_| format!("{s:?}: {addr:?} is not HOST:PORT with an IP address"))?;
    Ok(ServiceEndpoint {
        namespace: ns.to_string(),
        name: name.to_string(),
        port,
        addr,
    })
}

/// Why the emulator could not start, or stopped serving.
#[derive(Debug, thiserror::Error)]
pub enum EmulatorError {
    #[error("stopped serving: {0}")]
    Stopped(String),
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: document {index}: {detail}")]
    Parse {
        path: String,
        index: usize,
        detail: String,
    },
    #[error("{origin}: {kind} {name:?}: {detail}")]
    Object {
        origin: String,
        kind: String,
        name: String,
        detail: String,
    },
    #[error("cannot listen on {address}: {source}")]
    Listen {
        address: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot write kubeconfig {path}: {source}")]
    WriteKubeconfig {
        path: String,
        source: std::io::Error,
    },
}

/// An object read from a file, with where it came from for error messages.
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    pub origin: String,
    pub object: Value,
}

/// Parses YAML or JSON text holding one object, many `---` documents, or `List`s
/// (nested lists are flattened). Empty documents are skipped.
pub fn parse_objects(origin: &str, text: &str) -> Result<Vec<Loaded>, EmulatorError> {
    use serde::Deserialize;
    let mut out = Vec::new();
    for (i, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let index = i + 1;
        let value = Value::deserialize(doc).map_err(|e| EmulatorError::Parse {
            path: origin.to_string(),
            index,
            detail: e.to_string(),
        })?;
        flatten(origin, index, value, &mut out)?;
    }
    Ok(out)
}

fn flatten(
    origin: &str,
    index: usize,
    value: Value,
    out: &mut Vec<Loaded>,
) -> Result<(), EmulatorError> {
    match value {
        Value::Null => Ok(()),
        Value::Object(ref m) if m.get("items").is_some_and(Value::is_array) => {
            let items = m
                .get("items")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            for item in items {
                flatten(origin, index, item, out)?;
            }
            Ok(())
        }
        Value::Object(_) => {
            out.push(Loaded {
                origin: format!("{origin} (document {index})"),
                object: value,
            });
            Ok(())
        }
        other => Err(EmulatorError::Parse {
            path: origin.to_string(),
            index,
            detail: format!("expected an object, got {other}"),
        }),
    }
}

/// Reads and parses one `--load` file.
pub fn load_file(path: &Path) -> Result<Vec<Loaded>, EmulatorError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| EmulatorError::Read {
        path: shown.clone(),
        source,
    })?;
    parse_objects(&shown, &text)
}

/// Creates the objects in the store, namespaces first; namespaced objects without a
/// namespace go to `default`, as kubectl would put them. Returns what was created
/// (as stored).
pub fn seed(store: &Store, objects: Vec<Loaded>) -> Result<Vec<Value>, EmulatorError> {
    let (mut first, rest): (Vec<Loaded>, Vec<Loaded>) = objects
        .into_iter()
        .partition(|l| l.object.get("kind").and_then(Value::as_str) == Some("Namespace"));
    first.extend(rest);
    let mut created = Vec::new();
    for l in first {
        let s = |p: &str| {
            l.object
                .pointer(p)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let (api_version, kind, name) = (s("/apiVersion"), s("/kind"), s("/metadata/name"));
        let fail = |detail: String| EmulatorError::Object {
            origin: l.origin.clone(),
            kind: kind.clone(),
            name: name.clone(),
            detail,
        };
        let res = resources::by_kind(&api_version, &kind).ok_or_else(|| {
            fail(format!(
                "apiVersion {api_version:?} kind {kind:?} is not served by the emulator"
            ))
        })?;
        let ns = res.namespaced.then(|| {
            let n = s("/metadata/namespace");
            if n.is_empty() {
                "default".to_string()
            } else {
                n
            }
        });
        // The namespace existing ones always do (default, kube-system, ...): keep them.
        let is_builtin_ns =
            res.id == resources::NAMESPACES.id && store.get(&res, None, &name).is_ok();
        if is_builtin_ns {
            continue;
        }
        let obj = store
            .create(&res, ns.as_deref(), l.object.clone())
            .map_err(|e: ApiError| fail(e.to_string()))?;
        let stored_name = obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        tracing::info!(
            origin = %l.origin,
            kind = %kind,
            namespace = ns.as_deref().unwrap_or(""),
            name = %stored_name,
            "loaded object"
        );
        created.push(obj);
    }
    Ok(created)
}

/// A kubeconfig whose cluster, user and context are all named `kube-emulator`.
pub fn kubeconfig(server_url: &str) -> String {
    format!(
        "apiVersion: v1\n\
         kind: Config\n\
         clusters:\n\
         - name: kube-emulator\n  cluster:\n    server: {server_url}\n\
         users:\n\
         - name: kube-emulator\n  user: {{}}\n\
         contexts:\n\
         - name: kube-emulator\n  context:\n    cluster: kube-emulator\n    user: kube-emulator\n    namespace: default\n\
         current-context: kube-emulator\n\
         preferences: {{}}\n"
    )
}

fn grace_expiry(scale: f64) -> GraceExpiry {
    if scale < 0.0 {
        GraceExpiry::Never
    } else {
        GraceExpiry::Scaled(scale)
    }
}

/// Starts the emulator from the flags: loads the files (all of them parse before
/// anything listens), listens, writes the kubeconfig. The caller prints or uses
/// [`ApiServer::url`].
pub async fn start(cli: &Cli) -> Result<ApiServer, EmulatorError> {
    let mut objects = Vec::new();
    for path in &cli.load {
        let loaded = load_file(path)?;
        tracing::info!(file = %path.display(), objects = loaded.len(), "read objects");
        objects.extend(loaded);
    }
    let opts = Options {
        listen: cli.listen,
        grace_expiry: grace_expiry(cli.grace_scale),
        services: cli
            .service_endpoints
            .iter()
            .map(|e| (e.namespace.clone(), e.name.clone(), e.port, e.addr))
            .collect(),
        ..Options::default()
    };
    let server = ApiServer::start_with(opts)
        .await
        .map_err(|source| EmulatorError::Listen {
            address: cli.listen,
            source,
        })?;
    let created = seed(server.store(), objects)?;
    if !created.is_empty() {
        tracing::info!(objects = created.len(), "initial objects created");
    }
    if let Some(path) = &cli.kubeconfig_out {
        std::fs::write(path, kubeconfig(&server.url())).map_err(|source| {
            EmulatorError::WriteKubeconfig {
                path: path.display().to_string(),
                source,
            }
        })?;
        tracing::info!(path = %path.display(), "kubeconfig written");
    }
    Ok(server)
}

/// Runs until `shutdown` is cancelled; `on_ready` gets the URL once serving.
pub async fn run(
    cli: Cli,
    shutdown: CancellationToken,
    on_ready: impl FnOnce(&str),
) -> Result<(), EmulatorError> {
    let mut server = start(&cli).await?;
    tracing::info!(url = %server.url(), "kube-emulator serving");
    on_ready(&server.url());
    // Its serving tasks never end on their own: if one does, exit non-zero rather than
    // stay up answering nothing.
    tokio::select! {
        () = shutdown.cancelled() => {}
        why = server.stopped() => {
            tracing::error!(reason = %why, "kube-emulator stopped serving");
            return Err(EmulatorError::Stopped(why));
        }
    }
    tracing::info!("kube-emulator stopping");
    drop(server);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn flags_parse_with_the_shared_log_group() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from([
            "kube-emulator",
            "--listen=127.0.0.1:6443",
            "--load=a.yaml,b.yaml",
            "--grace-scale=-1",
            "--log-format=json",
            "--log-level=debug",
        ])
        .unwrap();
        assert_eq!(cli.listen, "127.0.0.1:6443".parse().unwrap());
        assert_eq!(cli.load.len(), 2);
        assert_eq!(cli.grace_scale, -1.0);
        assert_eq!(cli.log.log_format, hami_server::trace::LogFormat::Json);
        assert_eq!(cli.log.log_level.as_deref(), Some("debug"));
    }

    #[test]
    fn yaml_multi_documents_json_and_lists() {
        let yaml = "apiVersion: v1\nkind: Node\nmetadata: {name: a}\n---\n---\napiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Pod, metadata: {name: p}}\n- {apiVersion: v1, kind: Pod, metadata: {name: q}}\n";
        let got = parse_objects("f.yaml", yaml).unwrap();
        let names: Vec<&str> = got
            .iter()
            .map(|l| l.object["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["a", "p", "q"]);
        assert_eq!(got[1].origin, "f.yaml (document 3)");
        let json_text = r#"{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}"#;
        assert_eq!(parse_objects("f.json", json_text).unwrap().len(), 1);
    }

    #[test]
    fn garbage_is_an_error_naming_the_document() {
        let e = parse_objects("f.yaml", "a: 1\n---\n[1, 2\n").unwrap_err();
        assert!(e.to_string().starts_with("f.yaml: document 2:"), "{e}");
        let e = parse_objects("f.yaml", "just a string").unwrap_err();
        assert!(e.to_string().contains("expected an object"), "{e}");
    }

    #[test]
    fn seeding_puts_namespaces_first_and_defaults_the_namespace() {
        let store = Store::default();
        let objs = parse_objects(
            "f",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: team}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: q}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: team}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: default}\n",
        )
        .unwrap();
        let created = seed(&store, objs).unwrap();
        assert_eq!(created.len(), 3);
        assert!(store.get(&resources::PODS, Some("team"), "p").is_ok());
        assert!(store.get(&resources::PODS, Some("default"), "q").is_ok());
    }

    #[test]
    fn unknown_kinds_and_duplicates_are_refused() {
        let store = Store::default();
        let objs = vec![Loaded {
            origin: "f".into(),
            object: json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}}),
        }];
        let e = seed(&store, objs).unwrap_err();
        assert!(e.to_string().contains("not served"), "{e}");
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}});
        let twice = vec![
            Loaded {
                origin: "f".into(),
                object: node.clone(),
            },
            Loaded {
                origin: "g".into(),
                object: node,
            },
        ];
        let e = seed(&store, twice).unwrap_err();
        assert!(e.to_string().contains("already exists"), "{e}");
    }

    #[test]
    fn service_endpoints() {
        let e = parse_service_endpoint("kube-system/hami-webhook:443=127.0.0.1:9443").unwrap();
        assert_eq!(
            (e.namespace.as_str(), e.name.as_str(), e.port),
            ("kube-system", "hami-webhook", 443)
        );
        assert_eq!(e.addr, "127.0.0.1:9443".parse().unwrap());
        for bad in [
            "hami-webhook:443=127.0.0.1:1",
            "ns/svc=127.0.0.1:1",
            "ns/svc:x=127.0.0.1:1",
            "ns/svc:443=localhost:1",
            "/svc:443=127.0.0.1:1",
        ] {
            assert!(parse_service_endpoint(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn kubeconfig_is_valid_yaml_pointing_at_the_url() {
        let cfg: Value = serde_yaml_ng::from_str(&kubeconfig("http://127.0.0.1:1234")).unwrap();
        assert_eq!(
            cfg["clusters"][0]["cluster"]["server"],
            "http://127.0.0.1:1234"
        );
        assert_eq!(cfg["current-context"], "kube-emulator");
        assert_eq!(cfg["contexts"][0]["context"]["user"], "kube-emulator");
    }
}
