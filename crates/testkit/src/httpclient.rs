//! A small HTTP(S) client for the calls the emulators make to other components
//! (admission webhooks, scheduler extenders): one POST per connection, HTTP/1.1,
//! rustls with an explicit trust root, an overall deadline, a bounded response.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// The largest response read.
const MAX_RESPONSE: usize = 16 * 1024 * 1024;

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The full URL, for messages.
    pub url: String,
    pub https: bool,
    pub host: Host,
    /// Name for SNI and certificate verification, and the Host header.
    pub server_name: String,
    pub path_and_query: String,
}

/// How to reach the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    Addr(SocketAddr),
    Name(String, u16),
}

/// Splits an `http://` or `https://` URL.
pub fn parse_url(url: &str) -> Result<Target, String> {
    let (https, rest) = if let Some(r) = url.strip_prefix("https://") {
        (true, r)
    } else if let Some(r) = url.strip_prefix("http://") {
        (false, r)
    } else {
        return Err(format!("{url:?} is not an http:// or https:// URL"));
    };
    let (authority, tail) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
    let path_and_query = match tail {
        "" => "/".to_string(),
        t if t.starts_with('?') => format!("/{t}"),
        t => t.to_string(),
    };
    let default_port = if https { 443 } else { 80 };
    let (host, port) = split_host_port(authority, default_port)
        .ok_or_else(|| format!("{url:?} has an invalid host"))?;
    let host_kind = match host.parse::<std::net::IpAddr>() {
        Ok(ip) => Host::Addr(SocketAddr::new(ip, port)),
        Err(_) => Host::Name(host.clone(), port),
    };
    Ok(Target {
        url: format!(
            "{}://{authority}{path_and_query}",
            if https { "https" } else { "http" }
        ),
        https,
        host: host_kind,
        server_name: host,
        path_and_query,
    })
}

/// `host[:port]` with IPv6 in brackets.
fn split_host_port(authority: &str, default_port: u16) -> Option<(String, u16)> {
    if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None if after.is_empty() => default_port,
            None => return None,
        };
        return Some((host.to_string(), port));
    }
    match authority.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() => Some((h.to_string(), p.parse().ok()?)),
        Some(_) => None,
        None if !authority.is_empty() => Some((authority.to_string(), default_port)),
        None => None,
    }
}

/// A TLS client configuration trusting only the PEM certificates in `pem`.
pub fn tls_trusting(pem: &[u8]) -> Result<Arc<ClientConfig>, String> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| e.to_string())?;
        roots.add(cert).map_err(|e| e.to_string())?;
    }
    if roots.is_empty() {
        return Err("no PEM certificate found".into());
    }
    let config = ClientConfig::builder_with_provider(hami_server::tls::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// POSTs a JSON `body`, answering status and body. Errors read like Go's
/// `Post "<url>": <cause>`.
pub async fn post_json(
    target: &Target,
    tls: Option<Arc<ClientConfig>>,
    body: Vec<u8>,
    timeout: Duration,
) -> Result<(u16, Bytes), String> {
    let fail = |e: &dyn std::fmt::Display| format!("Post \"{}\": {e}", target.url);
    let call = async {
        let tcp = match &target.host {
            Host::Addr(a) => TcpStream::connect(a).await,
            Host::Name(h, p) => TcpStream::connect((h.as_str(), *p)).await,
        }
        .map_err(|e| fail(&e))?;
        let req = hyper::Request::builder()
            .method("POST")
            .uri(&target.path_and_query)
            .header(hyper::header::HOST, target.server_name.as_str())
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(hyper::header::ACCEPT, "application/json, */*")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| fail(&e))?;
        if target.https {
            let tls = tls.ok_or_else(|| fail(&"no TLS configuration for an https URL"))?;
            let name = ServerName::try_from(target.server_name.clone()).map_err(|e| fail(&e))?;
            let stream = TlsConnector::from(tls)
                .connect(name, tcp)
                .await
                .map_err(|e| fail(&format!("tls: {e}")))?;
            exchange(TokioIo::new(stream), req)
                .await
                .map_err(|e| fail(&e))
        } else {
            exchange(TokioIo::new(tcp), req).await.map_err(|e| fail(&e))
        }
    };
    match tokio::time::timeout(timeout, call).await {
        Ok(r) => r,
        Err(_) => Err(fail(&"context deadline exceeded")),
    }
}

async fn exchange<I>(io: I, req: hyper::Request<Full<Bytes>>) -> Result<(u16, Bytes), String>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| e.to_string())?;
    let driver = tokio::spawn(conn);
    let resp = sender.send_request(req).await.map_err(|e| e.to_string());
    let result = match resp {
        Ok(resp) => {
            let status = resp.status().as_u16();
            Limited::new(resp.into_body(), MAX_RESPONSE)
                .collect()
                .await
                .map(|b| (status, b.to_bytes()))
                .map_err(|e| format!("reading the response: {e}"))
        }
        Err(e) => Err(e),
    };
    drop(sender);
    driver.abort();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let t = parse_url("https://127.0.0.1:9443/mutate").unwrap();
        assert!(t.https);
        assert_eq!(t.host, Host::Addr("127.0.0.1:9443".parse().unwrap()));
        assert_eq!(t.server_name, "127.0.0.1");
        assert_eq!(t.path_and_query, "/mutate");
        let t = parse_url("http://extender.local?x=1").unwrap();
        assert!(!t.https);
        assert_eq!(t.host, Host::Name("extender.local".into(), 80));
        assert_eq!(t.url, "http://extender.local/?x=1");
        let t = parse_url("https://[::1]/").unwrap();
        assert_eq!(t.host, Host::Addr("[::1]:443".parse().unwrap()));
        for bad in ["ftp://x", "https://", "https://:80/", "http://h:port/"] {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn trust_roots_need_a_certificate() {
        assert!(tls_trusting(b"hello").is_err());
    }

    #[tokio::test]
    async fn connection_refused_and_timeouts_read_like_go() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        let t = parse_url(&format!("http://{addr}/filter")).unwrap();
        let e = post_json(&t, None, b"{}".to_vec(), Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(
            e.starts_with(&format!("Post \"http://{addr}/filter\": ")),
            "{e}"
        );
        let hang = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let t = parse_url(&format!("http://{}/x", hang.local_addr().unwrap())).unwrap();
        let e = post_json(&t, None, b"{}".to_vec(), Duration::from_millis(200))
            .await
            .unwrap_err();
        assert!(e.ends_with("context deadline exceeded"), "{e}");
    }
}
