#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The server over real sockets: TLS handshakes with rcgen certificates, rotation of
//! the certificate files, body limits, graceful shutdown.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use hami_server::body::read_request_bounded;
use hami_server::test_support::{
    PemPair, TestCa, http_request, https_request, request, write_atomically,
};
use hami_server::{CancellationToken, Handler, TlsConfig, handler_fn, respond, serve};
use hyper::StatusCode;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

fn install_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn echo_handler(limit: usize) -> Handler {
    handler_fn(move |req| async move {
        match read_request_bounded(req, limit).await {
            Ok((parts, body)) => respond::json(
                StatusCode::OK,
                &serde_json::json!({"path": parts.uri.path(), "len": body.len()}),
            ),
            Err(e) => e.to_response(),
        }
    })
}

struct Running {
    addr: SocketAddr,
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), hami_server::ServeError>>,
}

async fn start(tls: TlsConfig, handler: Handler) -> Running {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(serve(listener, tls, handler, shutdown.clone()));
    Running {
        addr,
        shutdown,
        task,
    }
}

struct TlsFiles {
    _dir: tempdir::Dir,
    cert: PathBuf,
    key: PathBuf,
}

mod tempdir {
    use std::path::{Path, PathBuf};

    /// A directory removed when dropped.
    pub struct Dir(PathBuf);
    impl Dir {
        pub fn new(tag: &str) -> Dir {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos();
            let p = std::env::temp_dir()
                .join(format!("hami-server-{tag}-{}-{nanos}", std::process::id()));
            std::fs::create_dir_all(&p).unwrap();
            Dir(p)
        }
        pub fn path(&self) -> &Path {
            &self.0
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn write_pair(tag: &str, pair: &PemPair) -> TlsFiles {
    let dir = tempdir::Dir::new(tag);
    let cert = dir.path().join("tls.crt");
    let key = dir.path().join("tls.key");
    std::fs::write(&cert, &pair.cert).unwrap();
    std::fs::write(&key, &pair.key).unwrap();
    TlsFiles {
        _dir: dir,
        cert,
        key,
    }
}

#[tokio::test]
async fn tls_handshake_and_request() {
    install_provider();
    let ca = TestCa::new("test ca").unwrap();
    let leaf = ca.leaf("webhook", &["localhost", "127.0.0.1"]).unwrap();
    let files = write_pair("handshake", &leaf);
    let srv = start(
        TlsConfig::Files {
            cert: files.cert.clone(),
            key: files.key.clone(),
        },
        echo_handler(1024),
    )
    .await;

    let resp = https_request(
        srv.addr,
        "localhost",
        &ca.pem(),
        request("POST", "/mutate", "hello").unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(resp.status, StatusCode::OK);
    assert_eq!(resp.text(), r#"{"len":5,"path":"/mutate"}"#);
    assert_eq!(resp.peer_cert.unwrap().as_ref(), leaf.der.as_slice());

    // A client that trusts another CA must fail the handshake.
    let other = TestCa::new("other ca").unwrap();
    let refused = https_request(
        srv.addr,
        "localhost",
        &other.pem(),
        request("GET", "/", "").unwrap(),
    )
    .await;
    assert!(refused.is_err());

    // Plain HTTP against the TLS port gets no HTTP answer.
    let plain = http_request(srv.addr, request("GET", "/", "").unwrap()).await;
    assert!(plain.is_err(), "{plain:?}");

    srv.shutdown.cancel();
    srv.task.await.unwrap().unwrap();
}

#[tokio::test]
async fn rotated_certificate_is_served_on_next_connection_and_bad_pair_is_ignored() {
    install_provider();
    let ca = TestCa::new("rotating ca").unwrap();
    let first = ca.leaf("first", &["localhost"]).unwrap();
    let files = write_pair("rotate", &first);
    let srv = start(
        TlsConfig::Files {
            cert: files.cert.clone(),
            key: files.key.clone(),
        },
        echo_handler(1024),
    )
    .await;
    let get = || async {
        https_request(
            srv.addr,
            "localhost",
            &ca.pem(),
            request("GET", "/", "").unwrap(),
        )
        .await
        .unwrap()
        .peer_cert
        .unwrap()
        .as_ref()
        .to_vec()
    };
    assert_eq!(get().await, first.der);

    // Replace both files the way a Secret volume does (new files, renamed in).
    let second = ca.leaf("second", &["localhost"]).unwrap();
    write_atomically(&files.key, second.key.as_bytes()).unwrap();
    write_atomically(&files.cert, second.cert.as_bytes()).unwrap();
    assert_eq!(get().await, second.der);

    // A certificate whose key does not match: logged, the previous pair stays.
    let third = ca.leaf("third", &["localhost"]).unwrap();
    write_atomically(&files.cert, third.cert.as_bytes()).unwrap();
    assert_eq!(get().await, second.der);
    // Garbage in place of the certificate: same.
    write_atomically(&files.cert, b"not a certificate").unwrap();
    assert_eq!(get().await, second.der);
    // The matching key arrives: the third pair is served.
    write_atomically(&files.cert, third.cert.as_bytes()).unwrap();
    write_atomically(&files.key, third.key.as_bytes()).unwrap();
    assert_eq!(get().await, third.der);

    // Rewriting in place (same inode) is seen too, at the latest after the periodic
    // content check.
    let fourth = ca.leaf("fourth", &["localhost"]).unwrap();
    std::fs::write(&files.key, &fourth.key).unwrap();
    std::fs::write(&files.cert, &fourth.cert).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        if get().await == fourth.der {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "in-place rewrite never picked up"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    srv.shutdown.cancel();
    srv.task.await.unwrap().unwrap();
}

#[tokio::test]
async fn unusable_initial_pair_is_an_error() {
    install_provider();
    let ca = TestCa::new("ca").unwrap();
    let a = ca.leaf("a", &["localhost"]).unwrap();
    let b = ca.leaf("b", &["localhost"]).unwrap();
    let mismatched = PemPair {
        cert: a.cert,
        key: b.key,
        der: a.der,
    };
    let files = write_pair("mismatch", &mismatched);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let err = serve(
        listener,
        TlsConfig::Files {
            cert: files.cert.clone(),
            key: files.key.clone(),
        },
        echo_handler(10),
        CancellationToken::new(),
    )
    .await
    .unwrap_err();
    assert!(
        err.to_string().contains("do not form a usable pair"),
        "{err}"
    );

    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let missing = serve(
        listener,
        TlsConfig::Files {
            cert: files.cert.with_file_name("absent.crt"),
            key: files.key.clone(),
        },
        echo_handler(10),
        CancellationToken::new(),
    )
    .await
    .unwrap_err();
    assert!(missing.to_string().contains("absent.crt"), "{missing}");

    assert!(TlsConfig::from_optional(Some("a".into()), None).is_err());
    assert_eq!(
        TlsConfig::from_optional(None, None).unwrap(),
        TlsConfig::None
    );
}

#[tokio::test]
async fn oversized_body_is_413_and_server_keeps_serving() {
    let srv = start(TlsConfig::None, echo_handler(64)).await;
    let big = vec![b'x'; 65];
    let resp = http_request(srv.addr, request("POST", "/x", big).unwrap())
        .await
        .unwrap();
    assert_eq!(resp.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(resp.text().contains("larger than the limit of 64 bytes"));

    let ok = http_request(srv.addr, request("POST", "/x", vec![b'x'; 64]).unwrap())
        .await
        .unwrap();
    assert_eq!(ok.status, StatusCode::OK);
    assert_eq!(ok.text(), r#"{"len":64,"path":"/x"}"#);

    srv.shutdown.cancel();
    srv.task.await.unwrap().unwrap();
}

#[tokio::test]
async fn handler_panic_becomes_500() {
    let handler = handler_fn(|req| async move {
        if req.uri().path() == "/boom" {
            panic!("boom");
        }
        respond::text(StatusCode::OK, "fine")
    });
    let srv = start(TlsConfig::None, handler).await;
    let resp = http_request(srv.addr, request("GET", "/boom", "").unwrap())
        .await
        .unwrap();
    assert_eq!(resp.status, StatusCode::INTERNAL_SERVER_ERROR);
    let resp = http_request(srv.addr, request("GET", "/ok", "").unwrap())
        .await
        .unwrap();
    assert_eq!(resp.text(), "fine\n");
    srv.shutdown.cancel();
    srv.task.await.unwrap().unwrap();
}

#[tokio::test]
async fn shutdown_lets_inflight_request_finish_and_stops_accepting() {
    let (entered_tx, entered_rx) = tokio::sync::oneshot::channel::<()>();
    let entered_tx = std::sync::Mutex::new(Some(entered_tx));
    let release = std::sync::Arc::new(tokio::sync::Notify::new());
    let release2 = release.clone();
    let handler = handler_fn(move |_req| {
        let tx = entered_tx.lock().unwrap().take();
        let release = release2.clone();
        async move {
            if let Some(tx) = tx {
                let _ = tx.send(());
            }
            release.notified().await;
            respond::text(StatusCode::OK, "done")
        }
    });
    let srv = start(TlsConfig::None, handler).await;
    let addr = srv.addr;
    let inflight =
        tokio::spawn(async move { http_request(addr, request("GET", "/slow", "").unwrap()).await });
    tokio::time::timeout(Duration::from_secs(10), entered_rx)
        .await
        .unwrap()
        .unwrap();
    srv.shutdown.cancel();
    release.notify_one();
    let resp = tokio::time::timeout(Duration::from_secs(10), inflight)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(resp.text(), "done\n");
    tokio::time::timeout(Duration::from_secs(10), srv.task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}
