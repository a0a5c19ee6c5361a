#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The admin port over a real socket.

use std::sync::Arc;
use std::time::Duration;

use hami_server::CancellationToken;
use hami_server::admin::{
    AdminState, METRICS_CONTENT_TYPE, MetricsPriority, Readiness, lower_encoding_priority,
    serve_admin,
};
use hami_server::listener::Relistener;
use hami_server::low_priority::{LowPrioritySlot, this_thread_is_idle_class};
use hami_server::supervise::{GaveUp, RestartPolicy, Supervisor, supervise_admin_with};
use hami_server::test_support::{TestCa, cpu_class_handler, http_request, https_request, request};
use hami_server::{Handler, TlsConfig, handler_fn, respond};
use http_body_util::BodyExt;
use hyper::StatusCode;
use hyper_util::rt::TokioIo;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

#[tokio::test]
async fn livez_readyz_metrics() {
    let mut registry = Registry::default();
    let counter: Counter = Counter::default();
    registry.register("test_events", "Events seen by the test", counter.clone());
    counter.inc_by(3);
    let readiness = Readiness::not_ready("caches not synced");
    let state = AdminState {
        readiness: readiness.clone(),
        registry: Arc::new(registry),
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(serve_admin(listener, state, shutdown.clone()));
    let get = |path: &'static str| async move {
        http_request(addr, request("GET", path, "").unwrap())
            .await
            .unwrap()
    };

    assert_eq!(get("/livez").await.status, StatusCode::OK);

    let not_ready = get("/readyz").await;
    assert_eq!(not_ready.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(not_ready.text(), "not ready: caches not synced\n");
    readiness.set_ready();
    assert_eq!(get("/readyz").await.status, StatusCode::OK);
    readiness.set_not_ready("lost the API server");
    let again = get("/readyz").await;
    assert_eq!(again.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(again.text().contains("lost the API server"));

    let metrics = get("/metrics").await;
    assert_eq!(metrics.status, StatusCode::OK);
    assert_eq!(
        metrics.headers[hyper::header::CONTENT_TYPE],
        METRICS_CONTENT_TYPE
    );
    let text = metrics.text();
    assert!(
        text.contains("# HELP test_events Events seen by the test."),
        "{text}"
    );
    assert!(text.contains("test_events_total 3"), "{text}");
    assert!(text.ends_with("# EOF\n"), "{text}");

    assert_eq!(get("/nope").await.status, StatusCode::NOT_FOUND);

    shutdown.cancel();
    task.await.unwrap().unwrap();
}

/// A client that accepts gzip (Prometheus does) gets the same page gzipped.
#[tokio::test]
async fn metrics_gzipped_when_the_client_accepts_it() {
    let mut registry = Registry::default();
    let events: Counter = Counter::default();
    events.inc_by(5);
    registry.register("test_events", "Events seen by the test", events);
    let state = AdminState {
        registry: Arc::new(registry),
        readiness: Readiness::ready(),
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(serve_admin(listener, state, shutdown.clone()));

    let plain = http_request(addr, request("GET", "/metrics", "").unwrap())
        .await
        .unwrap();
    assert_eq!(plain.headers.get(hyper::header::CONTENT_ENCODING), None);
    assert_eq!(plain.headers[hyper::header::VARY], "accept-encoding");
    assert!(
        plain.text().contains("test_events_total 5\n"),
        "{}",
        plain.text()
    );

    let mut gzip_request = request("GET", "/metrics", "").unwrap();
    gzip_request.headers_mut().insert(
        hyper::header::ACCEPT_ENCODING,
        hyper::header::HeaderValue::from_static("gzip"),
    );
    let gzipped = http_request(addr, gzip_request).await.unwrap();
    assert_eq!(gzipped.status, StatusCode::OK);
    assert_eq!(gzipped.headers[hyper::header::CONTENT_ENCODING], "gzip");
    assert_eq!(
        gzipped.headers[hyper::header::CONTENT_LENGTH],
        gzipped.body.len().to_string()
    );
    let mut decoded = String::new();
    std::io::Read::read_to_string(
        &mut flate2::read::MultiGzDecoder::new(&gzipped.body[..]),
        &mut decoded,
    )
    .unwrap();
    assert_eq!(decoded, plain.text());

    shutdown.cancel();
    task.await.unwrap().unwrap();
}

/// The admin port of [`serve_more`].
struct Served {
    addr: std::net::SocketAddr,
    /// Stops the server.
    shutdown: CancellationToken,
    /// The supervisor running the server and its `/metrics` thread.
    task: tokio::task::JoinHandle<Result<(), GaveUp>>,
    readiness: Readiness,
    /// The `/metrics` thread's slot.
    metrics_serve: LowPrioritySlot,
}

/// Serves the admin routes of `registry` and `more` over `tls`, `/metrics` connections at
/// the lowest priority, supervised as the scheduler does (a task restarted two seconds
/// after it stopped: time to look at it while it is down, on a loaded machine too).
async fn serve_more(registry: Registry, more: Handler, tls: TlsConfig) -> Served {
    let readiness = Readiness::ready();
    let state = AdminState {
        readiness: readiness.clone(),
        registry: Arc::new(registry),
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let policy = RestartPolicy {
        initial_delay: Duration::from_secs(2),
        max_delay: Duration::from_secs(2),
        ..RestartPolicy::default()
    };
    let mut sup = Supervisor::new(readiness.clone(), shutdown.clone(), policy);
    let metrics_serve = supervise_admin_with(
        &mut sup,
        Relistener::new(listener).unwrap(),
        state,
        Some(more),
        tls,
        MetricsPriority::Lowest,
    )
    .expect("the lowest priority has a thread");
    Served {
        addr,
        shutdown,
        task: tokio::spawn(sup.run()),
        readiness,
        metrics_serve,
    }
}

/// A service's own routes beside the admin ones, over TLS when the admin port has it.
#[tokio::test]
async fn more_routes_beside_the_admin_ones_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("admin test CA").unwrap();
    let leaf = ca.leaf("admin", &["localhost"]).unwrap();
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    std::fs::write(&cert, &leaf.cert).unwrap();
    std::fs::write(&key, &leaf.key).unwrap();
    let more = handler_fn(|req| async move {
        match req.uri().path() {
            "/ui" => respond::text(StatusCode::OK, "dashboard"),
            other => respond::text(StatusCode::NOT_FOUND, format!("not mine: {other}")),
        }
    });
    let tls = TlsConfig::Files { cert, key };
    let Served {
        addr,
        shutdown,
        task,
        ..
    } = serve_more(Registry::default(), more, tls).await;
    let get = |path: &'static str| {
        let ca = ca.pem();
        async move {
            https_request(addr, "localhost", &ca, request("GET", path, "").unwrap())
                .await
                .unwrap()
        }
    };
    let ui = get("/ui").await;
    assert_eq!(
        (ui.status, ui.text().as_str()),
        (StatusCode::OK, "dashboard\n")
    );
    assert_eq!(get("/readyz").await.status, StatusCode::OK);
    let other = get("/elsewhere").await;
    assert_eq!(other.status, StatusCode::NOT_FOUND);
    assert_eq!(other.text(), "not mine: /elsewhere\n");
    // Plain HTTP is not served on a TLS admin port.
    assert!(
        http_request(addr, request("GET", "/livez", "").unwrap())
            .await
            .is_err()
    );
    shutdown.cancel();
    task.await.unwrap().unwrap();
}

/// Notes the CPU class of the thread encoding the page, before and after it asks to be
/// lowered (as a collector does once it has copied what it reads under its locks).
#[derive(Debug, Default)]
struct NotesPriority(Arc<std::sync::Mutex<Vec<bool>>>);

impl prometheus_client::collector::Collector for NotesPriority {
    fn encode(
        &self,
        _: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        let mut seen = self.0.lock().unwrap();
        seen.push(this_thread_is_idle_class());
        lower_encoding_priority();
        seen.push(this_thread_is_idle_class());
        Ok(())
    }
}

/// GETs `paths` in turn over one keep-alive connection; the bodies.
async fn keep_alive_gets(addr: std::net::SocketAddr, paths: &[&str]) -> Vec<String> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut bodies = vec![];
    for path in paths {
        sender.ready().await.unwrap();
        let resp = sender
            .send_request(request("GET", path, "").unwrap())
            .await
            .unwrap();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        bodies.push(String::from_utf8_lossy(&body).into_owned());
    }
    bodies
}

/// A scrape's connection is served on a thread of the lowest CPU class, every request
/// on it; its page starts encoding at normal priority (it copies under locks request
/// threads wait for) and drops when asked; other connections are served as before.
#[tokio::test]
async fn a_scrape_is_served_at_the_lowest_priority_after_its_copy() {
    let seen = Arc::new(std::sync::Mutex::new(vec![]));
    let mut registry = Registry::default();
    registry.register_collector(Box::new(NotesPriority(seen.clone())));
    let more = cpu_class_handler();
    let served = serve_more(registry, more, TlsConfig::None).await;
    let addr = served.addr;
    wait_for(|| served.metrics_serve.current().is_some()).await;

    let scrape = keep_alive_gets(addr, &["/metrics", "/where"]).await;
    assert!(scrape[0].ends_with("# EOF\n"), "{scrape:?}");
    assert_eq!(scrape[1], "idle\n", "the scrape's connection");
    assert_eq!(
        *seen.lock().unwrap(),
        [false, true],
        "normal while it copies, the lowest class once it asks"
    );
    let other = keep_alive_gets(addr, &["/where", "/metrics"]).await;
    assert_eq!(other[0], "normal\n", "any other connection");
    served.shutdown.cancel();
    served.task.await.unwrap().unwrap();
}

/// Waits (up to 10 s) until `ready` holds.
async fn wait_for(ready: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !ready() {
        assert!(tokio::time::Instant::now() < deadline, "timed out");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The answer to `GET /readyz`: its status and text.
async fn readyz(addr: std::net::SocketAddr) -> (StatusCode, String) {
    let resp = http_request(addr, request("GET", "/readyz", "").unwrap())
        .await
        .unwrap();
    (resp.status, resp.text())
}

/// The thread serving scrapes is supervised: when it ends, `/readyz` says so with the
/// reason, a scrape meanwhile is still answered (at normal priority), and after the
/// restart scrapes are served on the lowest-priority thread again.
#[tokio::test]
async fn the_metrics_thread_ending_is_reported_and_it_is_restarted() {
    let more = cpu_class_handler();
    let served = serve_more(Registry::default(), more, TlsConfig::None).await;
    let addr = served.addr;
    wait_for(|| served.metrics_serve.current().is_some()).await;
    let first = served.metrics_serve.current().unwrap();
    assert_eq!(readyz(addr).await, (StatusCode::OK, "ready\n".into()));

    first.shut_down();
    assert_eq!(first.ended().await, "its runtime was shut down");
    // The restart comes two seconds later (`serve_more`): the window to look in.
    wait_for(|| served.readiness.check().is_err()).await;
    let (status, down) = readyz(addr).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{down}");
    assert!(
        down.starts_with(
            "not ready: metrics-serve thread: failed: the thread metrics-serve ended: \
             its runtime was shut down; restarting in"
        ),
        "{down}"
    );
    // Whether the restart came yet or not, the scrape is answered.
    let during = keep_alive_gets(addr, &["/metrics", "/where"]).await;
    assert!(during[0].ends_with("# EOF\n"), "{during:?}");

    wait_for(|| {
        served
            .metrics_serve
            .current()
            .is_some_and(|now| !Arc::ptr_eq(&now, &first))
    })
    .await;
    assert_eq!(readyz(addr).await, (StatusCode::OK, "ready\n".into()));
    let after = keep_alive_gets(addr, &["/metrics", "/where"]).await;
    assert!(after[0].ends_with("# EOF\n"), "{after:?}");
    assert_eq!(after[1], "idle\n", "on the restarted thread");
    served.shutdown.cancel();
    served.task.await.unwrap().unwrap();
    assert!(
        served.metrics_serve.current().is_none(),
        "stopped with the rest"
    );
}
