//! Calling a webhook: HTTPS with the configuration's caBundle as the only trust
//! root, the server name checked as kube-apiserver checks it (the URL's host, or
//! `<service>.<namespace>.svc`), and `?timeout=` on the URL.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use hami_core::sync::RwLockExt;
use rustls::ClientConfig;

use super::config::ClientConfig as HookClient;
use crate::httpclient::{Host, Target, parse_url, post_json, tls_trusting};

/// Where Services' ports are served, standing in for cluster DNS and endpoints:
/// `(namespace, name, port)` → a local address.
#[derive(Debug, Default)]
pub struct Services(RwLock<HashMap<(String, String, u16), SocketAddr>>);

impl Services {
    pub fn register(&self, namespace: &str, name: &str, port: u16, addr: SocketAddr) {
        self.0
            .write_unpoisoned()
            .insert((namespace.to_string(), name.to_string(), port), addr);
    }

    pub fn resolve(&self, namespace: &str, name: &str, port: u16) -> Option<SocketAddr> {
        self.0
            .read_unpoisoned()
            .get(&(namespace.to_string(), name.to_string(), port))
            .copied()
    }
}

/// Where to send the review for this client config: the URL (https only, as
/// kube-apiserver requires) or the Service, with `?timeout=` appended.
pub fn endpoint(
    cfg: &HookClient,
    services: &Services,
    timeout: Duration,
) -> Result<Target, String> {
    let timeout_q = format!("timeout={}s", timeout.as_secs());
    let with_query = |path: &str| {
        if path.contains('?') {
            format!("{path}&{timeout_q}")
        } else {
            format!("{path}?{timeout_q}")
        }
    };
    match (&cfg.url, &cfg.service) {
        (Some(url), None) => {
            let mut t = parse_url(url)?;
            if !t.https {
                return Err(format!("webhook url {url:?} must use the https scheme"));
            }
            t.path_and_query = with_query(&t.path_and_query);
            let authority = url
                .trim_start_matches("https://")
                .split(['/', '?'])
                .next()
                .unwrap_or("");
            t.url = format!("https://{authority}{}", t.path_and_query);
            Ok(t)
        }
        (None, Some(svc)) => {
            let port = svc.port.unwrap_or(443);
            let path = svc.path.clone().unwrap_or_else(|| "/".into());
            let path_and_query = with_query(&path);
            let dns = format!("{}.{}.svc", svc.name, svc.namespace);
            let url = format!("https://{dns}:{port}{path_and_query}");
            let addr = services
                .resolve(&svc.namespace, &svc.name, port)
                .ok_or_else(|| {
                    format!(
                        "failed to call webhook: Post \"{url}\": service \"{}/{}\" port {port} has no endpoint registered with the emulator",
                        svc.namespace, svc.name
                    )
                })?;
            Ok(Target {
                url,
                https: true,
                host: Host::Addr(addr),
                server_name: dns,
                path_and_query,
            })
        }
        _ => Err("clientConfig must set exactly one of url and service".into()),
    }
}

fn tls_config(ca_bundle: Option<&str>) -> Result<Arc<ClientConfig>, String> {
    let b64 = ca_bundle.filter(|b| !b.is_empty()).ok_or(
        "clientConfig.caBundle is empty: the emulator trusts only the configuration's caBundle",
    )?;
    let pem = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .map_err(|e| format!("clientConfig.caBundle is not base64: {e}"))?;
    tls_trusting(&pem).map_err(|e| format!("clientConfig.caBundle: {e}"))
}

/// POSTs `body` and answers the HTTP status and body; every failure is described
/// the way kube-apiserver words it (`failed to call webhook: Post "<url>": ...`).
pub async fn post(
    ep: &Target,
    ca_bundle: Option<&str>,
    body: Vec<u8>,
    timeout: Duration,
) -> Result<(u16, Bytes), String> {
    let tls = tls_config(ca_bundle)
        .map_err(|e| format!("failed to call webhook: Post \"{}\": {e}", ep.url))?;
    post_json(ep, Some(tls), body, timeout)
        .await
        .map_err(|e| format!("failed to call webhook: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(url: Option<&str>, svc: Option<(&str, &str, Option<u16>, Option<&str>)>) -> HookClient {
        HookClient {
            url: url.map(str::to_string),
            service: svc.map(
                |(ns, n, port, path)| super::super::config::ServiceReference {
                    namespace: ns.into(),
                    name: n.into(),
                    port,
                    path: path.map(str::to_string),
                },
            ),
            ca_bundle: None,
        }
    }

    #[test]
    fn url_endpoints() {
        let s = Services::default();
        let t = Duration::from_secs(10);
        let ep = endpoint(&cfg(Some("https://127.0.0.1:9443/mutate"), None), &s, t).unwrap();
        assert_eq!(ep.url, "https://127.0.0.1:9443/mutate?timeout=10s");
        assert_eq!(ep.server_name, "127.0.0.1");
        assert_eq!(ep.host, Host::Addr("127.0.0.1:9443".parse().unwrap()));
        let ep = endpoint(&cfg(Some("https://hooks.example?x=1"), None), &s, t).unwrap();
        assert_eq!(ep.path_and_query, "/?x=1&timeout=10s");
        assert_eq!(ep.host, Host::Name("hooks.example".into(), 443));
        assert_eq!(ep.url, "https://hooks.example/?x=1&timeout=10s");
        assert!(endpoint(&cfg(Some("http://127.0.0.1/"), None), &s, t).is_err());
        assert!(endpoint(&cfg(None, None), &s, t).is_err());
    }

    #[test]
    fn service_endpoints_need_registration() {
        let s = Services::default();
        let t = Duration::from_secs(5);
        let c = cfg(
            None,
            Some(("kube-system", "hami-webhook", None, Some("/mutate"))),
        );
        let err = endpoint(&c, &s, t).unwrap_err();
        assert!(
            err.contains("https://hami-webhook.kube-system.svc:443/mutate?timeout=5s"),
            "{err}"
        );
        s.register(
            "kube-system",
            "hami-webhook",
            443,
            "127.0.0.1:1234".parse().unwrap(),
        );
        let ep = endpoint(&c, &s, t).unwrap();
        assert_eq!(ep.server_name, "hami-webhook.kube-system.svc");
        assert_eq!(ep.host, Host::Addr("127.0.0.1:1234".parse().unwrap()));
    }

    #[test]
    fn ca_bundles() {
        assert!(tls_config(None).unwrap_err().contains("empty"));
        assert!(tls_config(Some("%%%")).unwrap_err().contains("base64"));
        let not_pem = base64::engine::general_purpose::STANDARD.encode("hello");
        assert!(tls_config(Some(&not_pem)).unwrap_err().contains("no PEM"));
    }
}
