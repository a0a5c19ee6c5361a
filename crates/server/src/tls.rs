//! TLS with rustls (ring provider, TLS 1.2 and 1.3) and a certificate resolver that
//! follows its files: cert-manager and Secret volumes replace them in place or by
//! symlink swap, and the server must pick the new pair up without a restart.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use hami_core::sync::MutexExt;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{ServerConfig, version};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// How often file contents are compared even when their metadata looks unchanged,
/// for filesystems whose timestamps are too coarse to show a quick rewrite.
const RECHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Whether a server speaks TLS and where its certificate lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsConfig {
    /// Plain HTTP.
    None,
    /// HTTPS with a PEM certificate chain (leaf first) and PEM private key
    /// (PKCS#8, PKCS#1 or SEC1), both re-read when they change.
    Files { cert: PathBuf, key: PathBuf },
}

impl TlsConfig {
    /// TLS when both files are given, plain when neither is; one without the other is
    /// an error (a half-configured server would silently serve plain HTTP).
    pub fn from_optional(cert: Option<PathBuf>, key: Option<PathBuf>) -> Result<Self, TlsError> {
        match (cert, key) {
            (Some(cert), Some(key)) => Ok(TlsConfig::Files { cert, key }),
            (None, None) => Ok(TlsConfig::None),
            _ => Err(TlsError::HalfConfigured),
        }
    }
}

/// Why a certificate/key pair could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("TLS needs both a certificate file and a key file, only one was given")]
    HalfConfigured,
    #[error("could not read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} holds no PEM certificate")]
    NoCertificate { path: PathBuf },
    #[error("{path}: invalid PEM certificate: {detail}")]
    BadCertificate { path: PathBuf, detail: String },
    #[error("{path} holds no usable PEM private key: {detail}")]
    BadKey { path: PathBuf, detail: String },
    #[error("certificate {cert} and key {key} do not form a usable pair: {source}")]
    Pair {
        cert: PathBuf,
        key: PathBuf,
        source: rustls::Error,
    },
    #[error("TLS configuration failed: {0}")]
    Config(rustls::Error),
}

/// The ring provider, used explicitly so TLS works whether or not a process-wide
/// default has been installed.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Builds the rustls server configuration for `tls` (None for plain HTTP).
pub fn server_config(tls: &TlsConfig) -> Result<Option<Arc<ServerConfig>>, TlsError> {
    let TlsConfig::Files { cert, key } = tls else {
        return Ok(None);
    };
    let provider = provider();
    let resolver = ReloadingCertResolver::new(cert.clone(), key.clone(), provider.clone())?;
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&version::TLS13, &version::TLS12])
        .map_err(TlsError::Config)?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(resolver));
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Some(Arc::new(config)))
}

/// The acceptor for `tls` (None for plain HTTP).
pub fn acceptor(tls: &TlsConfig) -> Result<Option<TlsAcceptor>, TlsError> {
    Ok(server_config(tls)?.map(TlsAcceptor::from))
}

/// Reads a PEM certificate chain and key from files and checks they match.
pub fn load_pair(
    cert: &Path,
    key: &Path,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let cert_pem = read(cert)?;
    let key_pem = read(key)?;
    parse_pair(cert, &cert_pem, key, &key_pem, provider)
}

/// Parses a PEM certificate chain and PEM key held in memory and checks they match
/// (for tools that get the pair from elsewhere than files, such as a Secret).
pub fn pair_from_pem(
    cert_pem: &[u8],
    key_pem: &[u8],
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    parse_pair(
        Path::new("<certificate>"),
        cert_pem,
        Path::new("<key>"),
        key_pem,
        provider,
    )
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn parse_pair(
    cert: &Path,
    cert_pem: &[u8],
    key: &Path,
    key_pem: &[u8],
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::BadCertificate {
            path: cert.to_path_buf(),
            detail: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            path: cert.to_path_buf(),
        });
    }
    let private = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| TlsError::BadKey {
        path: key.to_path_buf(),
        detail: e.to_string(),
    })?;
    CertifiedKey::from_der(chain, private, provider).map_err(|source| TlsError::Pair {
        cert: cert.to_path_buf(),
        key: key.to_path_buf(),
        source,
    })
}

/// What identifies a version of a file without reading it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

impl FileStamp {
    fn of(path: &Path) -> Option<FileStamp> {
        // metadata() follows symlinks, so a Secret volume's `..data` swap shows up.
        let meta = std::fs::metadata(path).ok()?;
        #[cfg(unix)]
        let inode = std::os::unix::fs::MetadataExt::ino(&meta);
        #[cfg(not(unix))]
        let inode = 0;
        Some(FileStamp {
            modified: meta.modified().ok(),
            len: meta.len(),
            inode,
        })
    }
}

#[derive(Debug)]
struct State {
    current: Arc<CertifiedKey>,
    /// The file contents `current` came from, or that last failed to load.
    seen: (Vec<u8>, Vec<u8>),
    stamps: (Option<FileStamp>, Option<FileStamp>),
    checked_at: Instant,
}

/// A [`ResolvesServerCert`] that serves the pair in two files and reloads it when
/// they change. The check runs at each handshake: a cheap `stat` of both files, and
/// a read only when they look different (or every second, for coarse timestamps). A
/// new pair that does not load (half-written, mismatched) is logged once and the
/// previous pair stays in use.
#[derive(Debug)]
pub struct ReloadingCertResolver {
    cert: PathBuf,
    key: PathBuf,
    provider: Arc<CryptoProvider>,
    state: Mutex<State>,
}

impl ReloadingCertResolver {
    /// Loads the pair now; fails if it is unusable.
    pub fn new(
        cert: PathBuf,
        key: PathBuf,
        provider: Arc<CryptoProvider>,
    ) -> Result<Self, TlsError> {
        let stamps = (FileStamp::of(&cert), FileStamp::of(&key));
        let cert_pem = read(&cert)?;
        let key_pem = read(&key)?;
        let loaded = parse_pair(&cert, &cert_pem, &key, &key_pem, &provider)?;
        Ok(ReloadingCertResolver {
            state: Mutex::new(State {
                current: Arc::new(loaded),
                seen: (cert_pem, key_pem),
                stamps,
                checked_at: Instant::now(),
            }),
            cert,
            key,
            provider,
        })
    }

    /// The pair in use now, after checking the files.
    pub fn current(&self) -> Arc<CertifiedKey> {
        let mut state = self.state.lock_unpoisoned();
        self.refresh(&mut state);
        state.current.clone()
    }

    fn refresh(&self, state: &mut State) {
        let stamps = (FileStamp::of(&self.cert), FileStamp::of(&self.key));
        if stamps == state.stamps && state.checked_at.elapsed() < RECHECK_INTERVAL {
            return;
        }
        state.stamps = stamps;
        state.checked_at = Instant::now();
        let (Ok(cert_pem), Ok(key_pem)) = (read(&self.cert), read(&self.key)) else {
            // Between the two steps of a rotation a file may be briefly missing.
            tracing::debug!(cert = %self.cert.display(), key = %self.key.display(), "TLS files not readable; keeping the current certificate");
            return;
        };
        if (cert_pem.as_slice(), key_pem.as_slice())
            == (state.seen.0.as_slice(), state.seen.1.as_slice())
        {
            return;
        }
        match parse_pair(&self.cert, &cert_pem, &self.key, &key_pem, &self.provider) {
            Ok(loaded) => {
                tracing::info!(cert = %self.cert.display(), "TLS certificate reloaded");
                state.current = Arc::new(loaded);
            }
            Err(e) => {
                tracing::error!(error = %e, "new TLS certificate/key not usable; keeping the previous one");
            }
        }
        state.seen = (cert_pem, key_pem);
    }
}

impl ResolvesServerCert for ReloadingCertResolver {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}
