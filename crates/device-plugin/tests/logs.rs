//! kubelet's calls run in a span naming the pod they serve (found from the node's
//! pending pod, since kubelet does not say): lines logged inside Allocate carry
//! `pod.namespace`, `pod.name` and `pod.uid`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use hami_server::test_support::LogCapture;
use hami_server::trace::{LogFormat, subscriber};
use serde_json::json;

#[tokio::test]
async fn allocate_lines_carry_the_pod() {
    // kubelet's calls are served by tasks of the plugin's own: the subscriber must be the
    // global one (this file holds this one test, so it owns the process).
    let capture = LogCapture::default();
    let dispatch = subscriber(LogFormat::Json, Some("info"), capture.clone()).unwrap();
    tracing::dispatcher::set_global_default(dispatch).unwrap();

    let mut c = Cluster::start().await;
    c.ready(8).await;
    let pod = c
        .scheduled_pod(
            "traced",
            json!([gpu_container("main", 1)]),
            json!([]),
            "GPU-b,NVIDIA,3000,30:;",
            true,
        )
        .await;
    c.kubelet.admit(&pod).await.unwrap();

    let lines = capture.json_logged("allocated");
    assert_eq!(lines.len(), 1, "{:?}", capture.lines());
    let allocated = &lines[0];
    let span = &allocated["span"];
    assert_eq!(span["name"], "allocate", "{allocated}");
    assert_eq!(span["pod.namespace"], "default", "{allocated}");
    assert_eq!(span["pod.name"], "traced", "{allocated}");
    assert_eq!(
        span["pod.uid"],
        pod.metadata.uid.as_deref().unwrap(),
        "{allocated}"
    );
}
