#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The admin port over a real socket.

use std::sync::Arc;

use hami_server::CancellationToken;
use hami_server::admin::{AdminState, METRICS_CONTENT_TYPE, Readiness, serve_admin};
use hami_server::test_support::{http_request, request};
use hyper::StatusCode;
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

/// A service's extra JSON routes answer beside the standard ones, computed per request.
#[tokio::test]
async fn extra_json_routes() {
    use hami_server::admin::{JsonRoutes, serve_admin_with};
    use std::sync::atomic::{AtomicU64, Ordering};
    let state = AdminState {
        readiness: Readiness::ready(),
        registry: Arc::new(Registry::default()),
    };
    let calls = Arc::new(AtomicU64::new(0));
    let seen = calls.clone();
    let routes = JsonRoutes::new().route(
        "/debug/thing",
        move || serde_json::json!({"calls": seen.fetch_add(1, Ordering::Relaxed) + 1}),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(serve_admin_with(listener, state, routes, shutdown.clone()));
    let get = |path: &'static str| async move {
        http_request(addr, request("GET", path, "").unwrap())
            .await
            .unwrap()
    };
    let first = get("/debug/thing").await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.text().trim(), r#"{"calls":1}"#);
    assert_eq!(get("/debug/thing").await.text().trim(), r#"{"calls":2}"#);
    assert_eq!(get("/livez").await.status, StatusCode::OK);
    assert_eq!(get("/debug/other").await.status, StatusCode::NOT_FOUND);
    shutdown.cancel();
    task.await.unwrap().unwrap();
}
