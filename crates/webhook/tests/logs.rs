#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! An admission review runs in a span naming the pod (its generateName prefix at CREATE,
//! before the API server names it): lines logged inside carry `pod.namespace`,
//! `pod.name` and `pod.uid`.

mod common;

use common::{container, pod, review};
use hami_server::test_support::LogCapture;
use hami_server::trace::{LogFormat, subscriber};
use hami_webhook::handler::{DEFAULT_BODY_LIMIT, Webhook};
use hami_webhook::metrics::{Metrics, Outcome};
use hami_webhook::rules::{RuleConfig, Rules};
use prometheus_client::registry::Registry;
use serde_json::json;

#[test]
fn admission_lines_carry_the_pod() {
    // The global subscriber (this file holds this one test, so it owns the process): a
    // scoped one can lose callsites other test threads register at the same time.
    let capture = LogCapture::default();
    let dispatch = subscriber(LogFormat::Json, Some("info"), capture.clone()).unwrap();
    tracing::dispatcher::set_global_default(dispatch).unwrap();

    let webhook = Webhook::new(
        Rules::new(RuleConfig::default()),
        Metrics::register(&mut Registry::default()),
        DEFAULT_BODY_LIMIT,
    );
    let object = pod(vec![container("train", json!({"nvidia.com/gpu": "1"}))]);
    let body = serde_json::to_vec(&review("admission.k8s.io/v1", "uid-1", object)).unwrap();
    let (_, outcome) = webhook.admit(&body).unwrap();
    assert_eq!(outcome, Outcome::Patched);

    let lines = capture.json_logged("admitted");
    assert_eq!(lines.len(), 1, "{:?}", capture.lines());
    let admitted = &lines[0];
    assert_eq!(admitted["span"]["name"], "admission", "{admitted}");
    assert_eq!(admitted["span"]["pod.namespace"], "team-a", "{admitted}");
    assert_eq!(admitted["span"]["pod.name"], "gpu-job-", "{admitted}");
    assert_eq!(admitted["span"]["pod.uid"], "", "{admitted}");
}
