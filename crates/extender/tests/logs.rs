//! Every /filter and /bind runs in a span naming its pod: lines logged inside carry
//! `pod.namespace`, `pod.name` and `pod.uid` (here in the JSON log format), so one pod's
//! path can be followed through the logs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{Cluster, Knobs, chosen, gpu_pod, gpus};
use hami_server::test_support::LogCapture;
use hami_server::trace::{LogFormat, subscriber};
use serde_json::json;

#[tokio::test]
async fn filter_and_bind_lines_carry_the_pod() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    // The HTTP side runs on a thread of its own: the subscriber must be the global one
    // (this file holds this one test, so it owns the process).
    let capture = LogCapture::default();
    let dispatch = subscriber(LogFormat::Json, Some("info"), capture.clone()).unwrap();
    tracing::dispatcher::set_global_default(dispatch).unwrap();

    let c = Cluster::start(&[("n1", gpus("n1", 2, 15_000))], Knobs::default()).await;
    let pod = c
        .create(&gpu_pod(
            "traced",
            &[json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"})],
            json!({}),
        ))
        .await;
    let uid = pod.metadata.uid.unwrap();
    let f = c.filter("traced").await;
    assert_eq!(chosen(&f).as_deref(), Some("n1"));
    c.wait_annotations("traced", |a| a.contains_key("hami.io/vgpu-node"))
        .await;
    assert_eq!(c.bind("traced", "n1").await.error, "");

    for (message, span) in [("filter: placed", "filter"), ("bind: bound", "bind")] {
        let lines = capture.json_logged(message);
        assert_eq!(lines.len(), 1, "{message}: {:?}", capture.lines());
        let fields = &lines[0]["span"];
        assert_eq!(fields["name"], span, "{}", lines[0]);
        assert_eq!(fields["pod.namespace"], "default", "{}", lines[0]);
        assert_eq!(fields["pod.name"], "traced", "{}", lines[0]);
        assert_eq!(fields["pod.uid"], uid.as_str(), "{}", lines[0]);
    }
}
