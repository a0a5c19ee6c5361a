//! Test helpers (feature `test-support`): a throwaway CA that issues serving
//! certificates, atomic file writes, a minimal HTTP/1.1 client over plain TCP or
//! rustls that reports the certificate the server presented, and log capture.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use hami_core::sync::MutexExt;
use http_body_util::{BodyExt, Full};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// Any error a test helper can hit.
pub type TestError = Box<dyn std::error::Error + Send + Sync>;

/// A self-signed CA that issues leaf certificates.
#[derive(Debug)]
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A PEM certificate and its PEM private key.
#[derive(Debug, Clone)]
pub struct PemPair {
    pub cert: String,
    pub key: String,
    /// DER of the certificate, to compare with what a server presented.
    pub der: Vec<u8>,
}

impl TestCa {
    pub fn new(common_name: &str) -> Result<Self, TestError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate()?)?;
        Ok(TestCa { issuer })
    }

    /// The CA certificate in PEM.
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A serving certificate for `sans` (DNS names or IP addresses).
    pub fn leaf(&self, common_name: &str, sans: &[&str]) -> Result<PemPair, TestError> {
        self.issue(common_name, sans, |_| {})
    }

    /// A serving certificate for `sans` that expired long ago (valid during 2000).
    pub fn expired_leaf(&self, common_name: &str, sans: &[&str]) -> Result<PemPair, TestError> {
        self.issue(common_name, sans, |p| {
            p.not_before = rcgen::date_time_ymd(2000, 1, 1);
            p.not_after = rcgen::date_time_ymd(2001, 1, 1);
        })
    }

    fn issue(
        &self,
        common_name: &str,
        sans: &[&str],
        tweak: impl FnOnce(&mut CertificateParams),
    ) -> Result<PemPair, TestError> {
        let sans: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(sans)?;
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        tweak(&mut params);
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(PemPair {
            cert: cert.pem(),
            key: key.serialize_pem(),
            der: cert.der().to_vec(),
        })
    }
}

/// Writes `contents` to `path` through a temporary file and a rename, as Secret
/// volumes and cert-manager do, so a reader never sees half a file.
pub fn write_atomically(path: &Path, contents: &[u8]) -> Result<(), TestError> {
    let tmp = path.with_extension("tmp-write");
    std::fs::write(&tmp, contents)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

/// What a test request got back.
#[derive(Debug)]
pub struct TestResponse {
    pub status: StatusCode,
    pub headers: hyper::HeaderMap,
    pub body: Bytes,
    /// The leaf certificate the server presented (TLS only).
    pub peer_cert: Option<CertificateDer<'static>>,
}

impl TestResponse {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A rustls client configuration trusting only `ca_pem`.
pub fn client_config(ca_pem: &str) -> Result<Arc<ClientConfig>, TestError> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert?)?;
    }
    let config = ClientConfig::builder_with_provider(crate::tls::provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// One request over a fresh TLS connection to `addr`, verifying the server as
/// `server_name` against `ca_pem`.
pub async fn https_request(
    addr: SocketAddr,
    server_name: &str,
    ca_pem: &str,
    request: Request<Full<Bytes>>,
) -> Result<TestResponse, TestError> {
    let connector = TlsConnector::from(client_config(ca_pem)?);
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from(server_name.to_string())?;
    let tls = connector.connect(name, tcp).await?;
    let peer_cert = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.clone().into_owned());
    let mut resp = exchange(TokioIo::new(tls), request).await?;
    resp.peer_cert = peer_cert;
    Ok(resp)
}

/// A handler answering `idle` or `normal`: whether the thread serving the request runs
/// in the lowest CPU class (`SCHED_IDLE`: [`crate::low_priority`]).
pub fn cpu_class_handler() -> crate::Handler {
    crate::handler_fn(|_| async {
        let class = if crate::low_priority::this_thread_is_idle_class() {
            "idle"
        } else {
            "normal"
        };
        crate::respond::text(StatusCode::OK, class)
    })
}

/// One request over a fresh plain TCP connection to `addr`.
pub async fn http_request(
    addr: SocketAddr,
    request: Request<Full<Bytes>>,
) -> Result<TestResponse, TestError> {
    let tcp = TcpStream::connect(addr).await?;
    exchange(TokioIo::new(tcp), request).await
}

/// A request for `path` with `body`; the Host header is filled in.
pub fn request(
    method: &str,
    path: &str,
    body: impl Into<Bytes>,
) -> Result<Request<Full<Bytes>>, TestError> {
    Ok(Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, "localhost")
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(Full::new(body.into()))?)
}

async fn exchange<I>(io: I, request: Request<Full<Bytes>>) -> Result<TestResponse, TestError>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await?;
    let driver = tokio::spawn(conn);
    let resp = sender.send_request(request).await?;
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await?.to_bytes();
    drop(sender);
    let _ = driver.await;
    Ok(TestResponse {
        status,
        headers,
        body,
        peer_cert: None,
    })
}

/// Log output kept in memory, for tests that check what was logged: give it to
/// [`crate::trace::subscriber`] as the writer, read [`LogCapture::lines`].
#[derive(Debug, Clone, Default)]
pub struct LogCapture(Arc<Mutex<Vec<u8>>>);

impl LogCapture {
    fn buffer(&self) -> MutexGuard<'_, Vec<u8>> {
        // A test that panicked while logging leaves the bytes it wrote: keep reading them.
        self.0.lock_unpoisoned()
    }

    /// The lines written so far, without the text format's ANSI colours.
    pub fn lines(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.buffer())
            .lines()
            .map(without_colours)
            .collect()
    }

    /// The JSON-format lines (see [`crate::trace::LogFormat::Json`]) whose message is
    /// `message`.
    pub fn json_logged(&self, message: &str) -> Vec<serde_json::Value> {
        self.lines()
            .iter()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["message"] == message)
            .collect()
    }
}

/// `line` without SGR sequences (`ESC [ … m`), the only escapes the log format writes.
fn without_colours(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

impl std::io::Write for LogCapture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.buffer().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogCapture {
    type Writer = LogCapture;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}
