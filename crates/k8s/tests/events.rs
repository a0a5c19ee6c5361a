//! The event recorder against the API server emulator: events queue until the writer
//! runs, and a writer started again after one stopped goes on with the same queue (it
//! runs as a supervised task).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use hami_k8s::events::{EventType, QUEUE, Recorder, Subject};
use hami_testkit::ApiServer;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};
use kube::{Client, Config};
use tokio_util::sync::CancellationToken;

/// The reasons of the events in `default`, once there are `n` (10 s at most).
async fn reasons_once(events: &Api<Event>, n: usize) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let list = events.list(&ListParams::default()).await.unwrap();
        let mut reasons: Vec<String> = list.items.into_iter().filter_map(|e| e.reason).collect();
        if reasons.len() >= n {
            reasons.sort();
            return reasons;
        }
        assert!(tokio::time::Instant::now() < deadline, "{reasons:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn events_wait_for_the_writer_and_outlive_its_restart() {
    let server = ApiServer::start().await.unwrap();
    let client = Client::try_from(Config::new(server.url().parse().unwrap())).unwrap();
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let recorder = Recorder::new(client, "hami-scheduler", "test");
    let pod = || Subject::pod("default", "web-0", Some("uid-1"));
    recorder.record(pod(), EventType::Normal, "Queued", "before the writer runs");

    let stop = CancellationToken::new();
    let first = tokio::spawn(recorder.writer().run(stop.clone()));
    assert_eq!(reasons_once(&events, 1).await, ["Queued"]);
    stop.cancel();
    first.await.unwrap().unwrap();

    recorder.record(pod(), EventType::Warning, "Later", "while no writer runs");
    let stop = CancellationToken::new();
    let second = tokio::spawn(recorder.writer().run(stop.clone()));
    assert_eq!(reasons_once(&events, 2).await, ["Later", "Queued"]);
    stop.cancel();
    second.await.unwrap().unwrap();
    assert_eq!(recorder.dropped(), 0);
}

/// A full queue drops the newest events and counts them (the extender exports the
/// count as `hami_scheduler_events_dropped_total`); recording never waits.
#[tokio::test]
async fn a_full_queue_counts_what_it_drops() {
    let server = ApiServer::start().await.unwrap();
    let client = Client::try_from(Config::new(server.url().parse().unwrap())).unwrap();
    let recorder = Recorder::new(client, "hami-scheduler", "test");
    for i in 0..QUEUE + 3 {
        recorder.record(
            Subject::pod("default", &format!("p{i}"), None),
            EventType::Normal,
            "Burst",
            "no writer runs yet",
        );
    }
    assert_eq!(recorder.dropped(), 3);
}
