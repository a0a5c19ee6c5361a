//! Calling a webhook: HTTPS with the configuration's caBundle as the only trust
//! root, the server name checked as kube-apiserver checks it (the URL's host, or
//! `<service>.<namespace>.svc`), and `?timeout=` on the URL.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::config::ClientConfig as HookClient;

/// The largest webhook response read.
const MAX_RESPONSE: usize = 16 * 1024 * 1024;

/// Where Services' ports are served, standing in for cluster DNS and endpoints:
/// `(namespace, name, port)` → a local address.
#[derive(Debug, Default)]
pub struct Services(RwLock<HashMap<(String, String, u16), SocketAddr>>);

impl Services {
    pub fn register(&self, namespace: &str, name: &str, port: u16, addr: SocketAddr) {
        self.0
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert((namespace.to_string(), name.to_string(), port), addr);
    }

    pub fn resolve(&self, namespace: &str, name: &str, port: u16) -> Option<SocketAddr> {
        self.0
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(namespace.to_string(), name.to_string(), port))
            .copied()
    }
}

/// A resolved webhook endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The URL as kube-apiserver would show it in errors.
    pub url: String,
    pub server_name: String,
    pub path_and_query: String,
    host: Host,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Host {
    Addr(SocketAddr),
    Name(String, u16),
}

/// Where to send the review for this client config.
pub fn endpoint(
    cfg: &HookClient,
    services: &Services,
    timeout: Duration,
) -> Result<Endpoint, String> {
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
            let rest = url
                .strip_prefix("https://")
                .ok_or_else(|| format!("webhook url {url:?} must use the https scheme"))?;
            let (authority, tail) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
            let path = match tail {
                "" => "/".to_string(),
                t if t.starts_with('?') => format!("/{t}"),
                t => t.to_string(),
            };
            let (host, port) = split_host_port(authority)
                .ok_or_else(|| format!("webhook url {url:?} has an invalid host"))?;
            let path_and_query = with_query(&path);
            let host = match host.parse::<std::net::IpAddr>() {
                Ok(ip) => Host::Addr(SocketAddr::new(ip, port)),
                Err(_) => Host::Name(host.clone(), port),
            };
            Ok(Endpoint {
                url: format!("https://{authority}{path_and_query}"),
                server_name: split_host_port(authority)
                    .map(|(h, _)| h)
                    .unwrap_or_default(),
                path_and_query,
                host,
            })
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
            Ok(Endpoint {
                url,
                server_name: dns,
                path_and_query,
                host: Host::Addr(addr),
            })
        }
        _ => Err("clientConfig must set exactly one of url and service".into()),
    }
}

/// `host[:port]` with IPv6 in brackets; 443 when no port is given.
fn split_host_port(authority: &str) -> Option<(String, u16)> {
    if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None if after.is_empty() => 443,
            None => return None,
        };
        return Some((host.to_string(), port));
    }
    match authority.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() => Some((h.to_string(), p.parse().ok()?)),
        Some(_) => None,
        None if !authority.is_empty() => Some((authority.to_string(), 443)),
        None => None,
    }
}

fn tls_config(ca_bundle: Option<&str>) -> Result<Arc<ClientConfig>, String> {
    use rustls::pki_types::pem::PemObject;
    let b64 = ca_bundle.filter(|b| !b.is_empty()).ok_or(
        "clientConfig.caBundle is empty: the emulator trusts only the configuration's caBundle",
    )?;
    let pem = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .map_err(|e| format!("clientConfig.caBundle is not base64: {e}"))?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| format!("clientConfig.caBundle: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("clientConfig.caBundle: {e}"))?;
    }
    if roots.is_empty() {
        return Err("clientConfig.caBundle holds no PEM certificate".into());
    }
    let config = ClientConfig::builder_with_provider(hami_server::tls::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// POSTs `body` and answers the HTTP status and body; every failure is described
/// the way kube-apiserver words it (`failed to call webhook: Post "<url>": ...`).
pub async fn post(
    ep: &Endpoint,
    ca_bundle: Option<&str>,
    body: Vec<u8>,
    timeout: Duration,
) -> Result<(u16, Bytes), String> {
    let fail =
        |e: &dyn std::fmt::Display| format!("failed to call webhook: Post \"{}\": {e}", ep.url);
    let tls = tls_config(ca_bundle).map_err(|e| fail(&e))?;
    let call = async {
        let tcp = match &ep.host {
            Host::Addr(a) => TcpStream::connect(a).await,
            Host::Name(h, p) => TcpStream::connect((h.as_str(), *p)).await,
        }
        .map_err(|e| fail(&e))?;
        let name = ServerName::try_from(ep.server_name.clone()).map_err(|e| fail(&e))?;
        let stream = TlsConnector::from(tls)
            .connect(name, tcp)
            .await
            .map_err(|e| fail(&format!("tls: {e}")))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| fail(&e))?;
        let driver = tokio::spawn(conn);
        let req = hyper::Request::builder()
            .method("POST")
            .uri(&ep.path_and_query)
            .header(hyper::header::HOST, ep.server_name.as_str())
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(hyper::header::ACCEPT, "application/json, */*")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| fail(&e))?;
        let resp = sender.send_request(req).await.map_err(|e| fail(&e))?;
        let status = resp.status().as_u16();
        let bytes = Limited::new(resp.into_body(), MAX_RESPONSE)
            .collect()
            .await
            .map_err(|e| fail(&format!("reading the response: {e}")))?
            .to_bytes();
        drop(sender);
        driver.abort();
        Ok((status, bytes))
    };
    match tokio::time::timeout(timeout, call).await {
        Ok(r) => r,
        Err(_) => Err(fail(&"context deadline exceeded")),
    }
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
