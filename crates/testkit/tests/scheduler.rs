//! The scheduler emulator against a fake extender over real HTTP(S): the wire
//! format (Go field names, NodeNames vs Nodes), built-in filters before the
//! extender, binding through the extender or the API, events, the PodScheduled
//! condition with kube-scheduler's message, retries, errors and ignorable extenders.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use hami_server::chunked::ChunkedBody;
use hami_server::{CancellationToken, TlsConfig, handler_fn};
use hami_testkit::ApiServer;
use hami_testkit::scheduler::{ExtenderConfig, ManagedResource, Scheduler, SchedulerConfig};
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, Config};
use serde_json::{Value, json};
use tokio::net::TcpListener;

const NAME: &str = "hami-scheduler";

fn client(server: &ApiServer) -> Client {
    Client::try_from(Config::new(server.url().parse().unwrap())).unwrap()
}

/// How the fake extender answers `filter`: given the args, the result.
type FilterFn = Arc<dyn Fn(&Value) -> Value + Send + Sync>;

/// How the fake extender binds one pod: after `delay`, and refusing the first `fail`
/// binds.
#[derive(Debug, Clone, Copy, Default)]
struct BindRule {
    delay: Duration,
    fail: usize,
}

type BindRules = Arc<Mutex<HashMap<String, BindRule>>>;

struct Fake {
    addr: SocketAddr,
    filters: Arc<Mutex<Vec<Value>>>,
    binds: Arc<Mutex<Vec<Value>>>,
    answer: Arc<Mutex<FilterFn>>,
    rules: BindRules,
    _stop: CancellationToken,
}

impl Fake {
    fn set_answer(&self, f: FilterFn) {
        *self.answer.lock().unwrap() = f;
    }
    fn filters(&self) -> Vec<Value> {
        self.filters.lock().unwrap().clone()
    }
    fn binds(&self) -> Vec<Value> {
        self.binds.lock().unwrap().clone()
    }
    fn binds_of(&self, pod: &str) -> usize {
        self.binds().iter().filter(|b| b["PodName"] == pod).count()
    }
    fn bind_rule(&self, pod: &str, rule: BindRule) {
        self.rules.lock().unwrap().insert(pod.to_string(), rule);
    }
}

/// A fake extender: `/filter` answers with the current `answer`; `/bind` binds
/// through the API server as HAMi's extender does, answering `{"Error": ""}`.
async fn fake_extender(api: String, tls: TlsConfig, answer: FilterFn) -> Fake {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let filters = Arc::new(Mutex::new(Vec::new()));
    let binds = Arc::new(Mutex::new(Vec::new()));
    let answer = Arc::new(Mutex::new(answer));
    let rules = BindRules::default();
    let stop = CancellationToken::new();
    let (f, b, a, r) = (
        filters.clone(),
        binds.clone(),
        answer.clone(),
        rules.clone(),
    );
    let handler = handler_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let (f, b, a, r, api) = (f.clone(), b.clone(), a.clone(), r.clone(), api.clone());
        async move {
            let path = req.uri().path().to_string();
            let body = req.into_body().collect().await.unwrap().to_bytes();
            let args: Value = serde_json::from_slice(&body).unwrap();
            let (code, out) = match path.as_str() {
                "/ext/filter" => {
                    f.lock().unwrap().push(args.clone());
                    let answer = a.lock().unwrap().clone();
                    (200, answer(&args))
                }
                "/ext/bind" => {
                    b.lock().unwrap().push(args.clone());
                    let pod = args["PodName"].as_str().unwrap().to_string();
                    let rule = r.lock().unwrap().get(&pod).copied().unwrap_or_default();
                    tokio::time::sleep(rule.delay).await;
                    if rule.fail > 0 {
                        r.lock().unwrap().entry(pod.clone()).or_default().fail -= 1;
                        let error = format!("node {} is locked", args["Node"]);
                        return hyper::Response::builder()
                            .status(200)
                            .header("content-type", "application/json")
                            .body(ChunkedBody::from(Bytes::from(
                                serde_json::to_vec(&json!({"Error": error})).unwrap(),
                            )))
                            .unwrap();
                    }
                    let client = Client::try_from(Config::new(api.parse().unwrap())).unwrap();
                    let pods: Api<Pod> =
                        Api::namespaced(client, args["PodNamespace"].as_str().unwrap());
                    let binding = json!({"apiVersion": "v1", "kind": "Binding",
                        "metadata": {"name": args["PodName"], "uid": args["PodUID"]},
                        "target": {"kind": "Node", "name": args["Node"]}});
                    let r = pods
                        .create_subresource::<Value, Value>(
                            "binding",
                            args["PodName"].as_str().unwrap(),
                            &PostParams::default(),
                            &binding,
                        )
                        .await;
                    let error = r.err().map(|e| e.to_string()).unwrap_or_default();
                    (200, json!({"Error": error}))
                }
                _ => (404, json!({})),
            };
            hyper::Response::builder()
                .status(code)
                .header("content-type", "application/json")
                .body(ChunkedBody::from(Bytes::from(
                    serde_json::to_vec(&out).unwrap(),
                )))
                .unwrap()
        }
    });
    tokio::spawn(hami_server::serve(listener, tls, handler, stop.clone()));
    Fake {
        addr,
        filters,
        binds,
        answer,
        rules,
        _stop: stop,
    }
}

fn keep(names: &'static [&'static str], failed: Value) -> FilterFn {
    Arc::new(
        move |_args: &Value| json!({"Nodes": null, "NodeNames": names, "FailedNodes": failed, "FailedAndUnresolvableNodes": null, "Error": ""}),
    )
}

fn gpu_extender(fake: &Fake) -> ExtenderConfig {
    ExtenderConfig {
        url_prefix: format!("http://{}/ext", fake.addr),
        managed_resources: vec![
            ManagedResource {
                name: "nvidia.com/gpu".into(),
                ignored_by_scheduler: true,
            },
            ManagedResource {
                name: "nvidia.com/gpumem".into(),
                ignored_by_scheduler: true,
            },
        ],
        http_timeout: Duration::from_secs(10),
        ..ExtenderConfig::default()
    }
}

fn config(ext: ExtenderConfig) -> SchedulerConfig {
    SchedulerConfig {
        initial_backoff: Duration::from_millis(100),
        max_backoff: Duration::from_millis(400),
        ..SchedulerConfig::new(NAME).with_extender(ext)
    }
}

async fn node(server: &ApiServer, name: &str, extra: Value) {
    let mut n = json!({
        "metadata": {"name": name, "labels": {"pool": "gpu"}},
        "spec": {},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "4"},
                   "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "4"},
                   "conditions": [{"type": "Ready", "status": "True"}]}
    });
    json_patch::merge(&mut n, &extra);
    let nodes: Api<Node> = Api::all(client(server));
    nodes
        .create(&PostParams::default(), &serde_json::from_value(n).unwrap())
        .await
        .unwrap();
}

async fn pod(server: &ApiServer, name: &str, scheduler: &str, limits: Value, extra: Value) -> Pod {
    let mut p = json!({
        "metadata": {"name": name},
        "spec": {"schedulerName": scheduler, "containers": [{"name": "c", "image": "cuda:12", "resources": {"limits": limits}}]}
    });
    json_patch::merge(&mut p, &extra);
    let pods: Api<Pod> = Api::namespaced(client(server), "default");
    pods.create(&PostParams::default(), &serde_json::from_value(p).unwrap())
        .await
        .unwrap()
}

/// Polls `f` until it answers Some, failing after 30 s with `what`.
async fn wait<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn bound_node(server: &ApiServer, name: &str) -> Option<String> {
    let pods: Api<Pod> = Api::namespaced(client(server), "default");
    pods.get(name)
        .await
        .ok()?
        .spec?
        .node_name
        .filter(|n| !n.is_empty())
}

async fn events_for(server: &ApiServer, pod: &str) -> Vec<Event> {
    let events: Api<Event> = Api::namespaced(client(server), "default");
    events
        .list(&ListParams::default().fields(&format!("involvedObject.name={pod}")))
        .await
        .unwrap()
        .items
}

fn scheduled_condition(p: &Pod) -> Option<(String, String, String)> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled")
        .map(|c| {
            (
                c.status.clone(),
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
}

#[tokio::test]
async fn filters_then_extender_then_extender_bind() {
    let server = ApiServer::start().await.unwrap();
    let fake = fake_extender(
        server.url(),
        TlsConfig::None,
        keep(&["n4"], json!({"n3": "1/1 CardInsufficientMemory"})),
    )
    .await;
    node(&server, "n1", json!({"spec": {"unschedulable": true}})).await;
    node(
        &server,
        "n2",
        json!({"metadata": {"labels": {"pool": "cpu"}}}),
    )
    .await;
    node(&server, "n3", json!({})).await;
    node(&server, "n4", json!({})).await;
    let _sched = Scheduler::start(client(&server), config(gpu_extender(&fake)));
    let created = pod(
        &server,
        "p",
        NAME,
        json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"}),
        json!({"spec": {"nodeSelector": {"pool": "gpu"}}}),
    )
    .await;

    let host = wait("p bound", || bound_node(&server, "p")).await;
    assert_eq!(host, "n4");
    let filters = fake.filters();
    assert_eq!(filters.len(), 1);
    let args = &filters[0];
    assert!(args["Nodes"].is_null(), "nodeCacheCapable sends names only");
    assert_eq!(
        args["NodeNames"],
        json!(["n3", "n4"]),
        "built-in filters ran first"
    );
    assert_eq!(args["Pod"]["metadata"]["name"], "p");
    assert_eq!(
        args["Pod"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"],
        "1"
    );
    assert_eq!(
        fake.binds(),
        [
            json!({"PodName": "p", "PodNamespace": "default", "PodUID": created.metadata.uid.unwrap(), "Node": "n4"})
        ]
    );
    let events = wait("Scheduled event", || async {
        let evs = events_for(&server, "p").await;
        (!evs.is_empty()).then_some(evs)
    })
    .await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].reason.as_deref(), Some("Scheduled"));
    assert_eq!(events[0].type_.as_deref(), Some("Normal"));
    assert_eq!(
        events[0].message.as_deref(),
        Some("Successfully assigned default/p to n4")
    );
    assert_eq!(
        events[0].source.as_ref().unwrap().component.as_deref(),
        Some(NAME)
    );
    let pods: Api<Pod> = Api::namespaced(client(&server), "default");
    let (status, _, _) = scheduled_condition(&pods.get("p").await.unwrap()).unwrap();
    assert_eq!(status, "True");

    // Pods of other schedulers are not ours: by the time a later pod of ours is
    // bound, the queue has gone past the earlier foreign one.
    pod(&server, "theirs", "default-scheduler", json!({}), json!({})).await;
    pod(
        &server,
        "later",
        NAME,
        json!({"nvidia.com/gpu": "1"}),
        json!({}),
    )
    .await;
    assert_eq!(
        wait("later bound", || bound_node(&server, "later")).await,
        "n4"
    );
    assert_eq!(bound_node(&server, "theirs").await, None);
    let sent: Vec<Value> = fake
        .filters()
        .iter()
        .map(|a| a["Pod"]["metadata"]["name"].clone())
        .collect();
    assert_eq!(sent, [json!("p"), json!("later")]);
}

#[tokio::test]
async fn unschedulable_pods_get_the_fit_error_and_are_retried() {
    let server = ApiServer::start().await.unwrap();
    let fake = fake_extender(
        server.url(),
        TlsConfig::None,
        keep(
            &[],
            json!({"n3": "1/1 CardInsufficientMemory", "n4": "1/1 CardInsufficientMemory"}),
        ),
    )
    .await;
    node(&server, "n1", json!({"spec": {"unschedulable": true}})).await;
    node(
        &server,
        "n2",
        json!({"spec": {"taints": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]}}),
    )
    .await;
    node(&server, "n3", json!({})).await;
    node(&server, "n4", json!({})).await;
    let _sched = Scheduler::start(client(&server), config(gpu_extender(&fake)));
    pod(
        &server,
        "big",
        NAME,
        json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "99999"}),
        json!({}),
    )
    .await;

    let want = "0/4 nodes are available: 1 node(s) had untolerated taint {dedicated: ml}, 1 node(s) were unschedulable, 2 1/1 CardInsufficientMemory.";
    let pods: Api<Pod> = Api::namespaced(client(&server), "default");
    let cond = wait("PodScheduled=False", || async {
        scheduled_condition(&pods.get("big").await.ok()?).filter(|c| c.0 == "False")
    })
    .await;
    assert_eq!(cond, ("False".into(), "Unschedulable".into(), want.into()));
    // Retried with backoff; the event is counted, not repeated.
    let ev = wait("FailedScheduling counted twice", || async {
        events_for(&server, "big")
            .await
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("FailedScheduling") && e.count.unwrap_or(0) >= 2)
    })
    .await;
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
    assert_eq!(ev.message.as_deref(), Some(want));
    assert_eq!(events_for(&server, "big").await.len(), 1);
    assert!(fake.filters().len() >= 2);

    // Once the extender finds room, the next retry binds the pod.
    fake.set_answer(keep(&["n3"], json!({})));
    assert_eq!(wait("big bound", || bound_node(&server, "big")).await, "n3");
    let cond = scheduled_condition(&pods.get("big").await.unwrap()).unwrap();
    assert_eq!(cond.0, "True");
}

#[tokio::test]
async fn whole_nodes_when_not_cache_capable_and_api_binding() {
    let server = ApiServer::start().await.unwrap();
    let answer: FilterFn = Arc::new(|args: &Value| {
        // Keep the second node of what was sent, as full objects.
        let items = args["Nodes"]["items"].as_array().unwrap();
        json!({"Nodes": {"metadata": {}, "items": [items[1].clone()]}, "NodeNames": null, "FailedNodes": {}, "Error": ""})
    });
    let fake = fake_extender(server.url(), TlsConfig::None, answer).await;
    node(&server, "a", json!({})).await;
    node(&server, "b", json!({})).await;
    let ext = ExtenderConfig {
        node_cache_capable: false,
        bind_verb: String::new(),
        ..gpu_extender(&fake)
    };
    let _sched = Scheduler::start(client(&server), config(ext));
    pod(
        &server,
        "p",
        NAME,
        json!({"nvidia.com/gpu": "1"}),
        json!({}),
    )
    .await;
    assert_eq!(wait("p bound", || bound_node(&server, "p")).await, "b");
    let args = &fake.filters()[0];
    assert!(args["NodeNames"].is_null());
    assert_eq!(args["Nodes"]["items"][0]["metadata"]["name"], "a");
    assert_eq!(
        args["Nodes"]["items"][1]["status"]["allocatable"]["nvidia.com/gpu"],
        "4"
    );
    assert!(
        fake.binds().is_empty(),
        "no bind verb: bound through the API"
    );
}

#[tokio::test]
async fn managed_resources_decide_interest_and_fit() {
    let server = ApiServer::start().await.unwrap();
    let fake = fake_extender(server.url(), TlsConfig::None, keep(&["a"], json!({}))).await;
    node(&server, "a", json!({})).await;
    let _sched = Scheduler::start(client(&server), config(gpu_extender(&fake)));
    // Not interested: a CPU pod never reaches the extender and binds through the API.
    pod(&server, "cpu", NAME, json!({"cpu": "1"}), json!({})).await;
    assert_eq!(wait("cpu bound", || bound_node(&server, "cpu")).await, "a");
    assert!(fake.filters().is_empty());
    assert!(fake.binds().is_empty());
    // Ignored by the scheduler: 9 GPUs on a 4-GPU node are the extender's call.
    pod(
        &server,
        "many",
        NAME,
        json!({"nvidia.com/gpu": "9"}),
        json!({}),
    )
    .await;
    assert_eq!(
        wait("many bound", || bound_node(&server, "many")).await,
        "a"
    );
    // Plain resources still fit-checked: too much CPU never reaches the extender.
    pod(
        &server,
        "hog",
        NAME,
        json!({"cpu": "100", "nvidia.com/gpu": "1"}),
        json!({}),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client(&server), "default");
    let cond = wait("hog unschedulable", || async {
        scheduled_condition(&pods.get("hog").await.ok()?).filter(|c| c.0 == "False")
    })
    .await;
    assert_eq!(cond.2, "0/1 nodes are available: 1 Insufficient cpu.");
    assert_eq!(fake.filters().len(), 1, "only 'many' was sent");
}

#[tokio::test]
async fn resource_fit_counts_pods_already_placed() {
    let server = ApiServer::start().await.unwrap();
    let fake = fake_extender(server.url(), TlsConfig::None, keep(&["a"], json!({}))).await;
    node(
        &server,
        "a",
        json!({"status": {"allocatable": {"nvidia.com/gpu": "2"}}}),
    )
    .await;
    let ext = ExtenderConfig {
        managed_resources: vec![ManagedResource {
            name: "nvidia.com/gpu".into(),
            ignored_by_scheduler: false,
        }],
        ..gpu_extender(&fake)
    };
    let _sched = Scheduler::start(client(&server), config(ext));
    pod(
        &server,
        "one",
        NAME,
        json!({"nvidia.com/gpu": "2"}),
        json!({}),
    )
    .await;
    assert_eq!(wait("one bound", || bound_node(&server, "one")).await, "a");
    pod(
        &server,
        "two",
        NAME,
        json!({"nvidia.com/gpu": "1"}),
        json!({}),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client(&server), "default");
    let cond = wait("two unschedulable", || async {
        scheduled_condition(&pods.get("two").await.ok()?).filter(|c| c.0 == "False")
    })
    .await;
    assert_eq!(
        cond.2,
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    );
}

#[tokio::test]
async fn extender_errors_fail_the_pod_unless_ignorable() {
    let server = ApiServer::start().await.unwrap();
    let failing: FilterFn = Arc::new(|_| json!({"Error": "ledger not synced yet"}));
    let fake = fake_extender(server.url(), TlsConfig::None, failing).await;
    node(&server, "a", json!({})).await;
    let _sched = Scheduler::start(client(&server), config(gpu_extender(&fake)));
    pod(
        &server,
        "p",
        NAME,
        json!({"nvidia.com/gpu": "1"}),
        json!({}),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client(&server), "default");
    let cond = wait("SchedulerError", || async {
        scheduled_condition(&pods.get("p").await.ok()?).filter(|c| c.0 == "False")
    })
    .await;
    assert_eq!(
        cond,
        (
            "False".into(),
            "SchedulerError".into(),
            "ledger not synced yet".into()
        )
    );
    drop(_sched);

    // An extender that is down: an error naming the URL, or skipped when ignorable.
    let dead = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let down = ExtenderConfig {
        url_prefix: format!("http://{dead}/ext"),
        ..gpu_extender(&fake)
    };
    let _sched = Scheduler::start(client(&server), config(down.clone()));
    pod(
        &server,
        "q",
        NAME,
        json!({"nvidia.com/gpu": "1"}),
        json!({}),
    )
    .await;
    let cond = wait("q fails", || async {
        scheduled_condition(&pods.get("q").await.ok()?).filter(|c| c.0 == "False")
    })
    .await;
    assert!(
        cond.2
            .starts_with(&format!("Post \"http://{dead}/ext/filter\"")),
        "{}",
        cond.2
    );
    drop(_sched);
    let ignorable = ExtenderConfig {
        ignorable: true,
        bind_verb: String::new(),
        ..down
    };
    let _sched = Scheduler::start(client(&server), config(ignorable));
    assert_eq!(
        wait("q bound despite the dead extender", || bound_node(
            &server, "q"
        ))
        .await,
        "a"
    );

    // A non-200 answer is an error with kube-scheduler's wording.
    let url = format!("http://{}/nowhere", fake.addr);
    let not_found = ExtenderConfig {
        url_prefix: url.clone(),
        ..gpu_extender(&fake)
    };
    drop(_sched);
    let _sched = Scheduler::start(client(&server), config(not_found));
    pod(
        &server,
        "r",
        NAME,
        json!({"nvidia.com/gpu": "1"}),
        json!({}),
    )
    .await;
    let cond = wait("r fails", || async {
        scheduled_condition(&pods.get("r").await.ok()?).filter(|c| c.0 == "False")
    })
    .await;
    assert_eq!(
        cond.2,
        format!("failed filter with extender at URL {url}/filter, code 404")
    );
}

#[tokio::test]
async fn https_extenders_are_verified_against_their_ca() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let server = ApiServer::start().await.unwrap();
    let dir = std::env::temp_dir().join(format!("sched-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = hami_server::test_support::TestCa::new("extender ca").unwrap();
    let leaf = ca.leaf("extender", &["127.0.0.1"]).unwrap();
    std::fs::write(dir.join("tls.crt"), &leaf.cert).unwrap();
    std::fs::write(dir.join("tls.key"), &leaf.key).unwrap();
    let tls = TlsConfig::Files {
        cert: dir.join("tls.crt"),
        key: dir.join("tls.key"),
    };
    let fake = fake_extender(server.url(), tls, keep(&["a"], json!({}))).await;
    node(&server, "a", json!({})).await;
    let ext = ExtenderConfig {
        url_prefix: format!("https://127.0.0.1:{}/ext", fake.addr.port()),
        ca_pem: Some(ca.pem()),
        ..gpu_extender(&fake)
    };
    let _sched = Scheduler::start(client(&server), config(ext));
    pod(
        &server,
        "p",
        NAME,
        json!({"nvidia.com/gpu": "1"}),
        json!({}),
    )
    .await;
    assert_eq!(
        wait("p bound over https", || bound_node(&server, "p")).await,
        "a"
    );
    assert_eq!(fake.binds().len(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Keeps every node it is sent.
fn keep_all() -> FilterFn {
    Arc::new(
        |args: &Value| json!({"Nodes": null, "NodeNames": args["NodeNames"], "FailedNodes": null, "FailedAndUnresolvableNodes": null, "Error": ""}),
    )
}

/// A GPU pod asking for 6 of a node's 8 CPUs: two of them never fit one node.
async fn big_pod(server: &ApiServer, name: &str) -> Pod {
    pod(
        server,
        name,
        NAME,
        json!({"nvidia.com/gpu": "1", "cpu": "6"}),
        json!({}),
    )
    .await
}

#[tokio::test]
async fn a_slow_bind_does_not_hold_up_the_next_pod_and_its_pod_counts_as_assumed() {
    let server = ApiServer::start().await.unwrap();
    let fake = fake_extender(server.url(), TlsConfig::None, keep_all()).await;
    node(&server, "n1", json!({})).await;
    node(&server, "n2", json!({})).await;
    fake.bind_rule(
        "slow",
        BindRule {
            delay: Duration::from_secs(4),
            fail: 0,
        },
    );
    let _sched = Scheduler::start(client(&server), config(gpu_extender(&fake)));
    big_pod(&server, "slow").await;
    wait("the bind of slow started", || async {
        (fake.binds_of("slow") == 1).then_some(())
    })
    .await;
    big_pod(&server, "fast").await;
    // Scheduled and bound while slow's bind is still in flight; slow, assumed on n1
    // (the first feasible node), leaves no room there.
    assert_eq!(
        wait("fast bound", || bound_node(&server, "fast")).await,
        "n2"
    );
    assert_eq!(
        bound_node(&server, "slow").await,
        None,
        "fast was bound while slow's bind was in flight"
    );
    assert_eq!(
        wait("slow bound", || bound_node(&server, "slow")).await,
        "n1"
    );
    assert_eq!(fake.binds_of("slow"), 1);
    assert_eq!(fake.binds_of("fast"), 1);
}

#[tokio::test]
async fn a_failed_bind_forgets_the_assumption_and_requeues_the_pod() {
    let server = ApiServer::start().await.unwrap();
    let fake = fake_extender(server.url(), TlsConfig::None, keep_all()).await;
    node(&server, "n1", json!({})).await;
    node(&server, "n2", json!({})).await;
    fake.bind_rule(
        "p",
        BindRule {
            delay: Duration::ZERO,
            fail: 1,
        },
    );
    let _sched = Scheduler::start(client(&server), config(gpu_extender(&fake)));
    big_pod(&server, "p").await;
    // Bound to n1 at the second try: the failed bind's assumption on n1 was forgotten
    // (else n1 would look full and p would go to n2).
    assert_eq!(wait("p bound", || bound_node(&server, "p")).await, "n1");
    assert_eq!(fake.binds_of("p"), 2);
    let filtered = fake
        .filters()
        .iter()
        .filter(|a| a["Pod"]["metadata"]["name"] == "p")
        .count();
    assert_eq!(filtered, 2, "the pod went through a new scheduling cycle");
    let events = wait("both events", || async {
        let evs = events_for(&server, "p").await;
        (evs.len() >= 2).then_some(evs)
    })
    .await;
    let failed = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("FailedScheduling"))
        .expect("a FailedScheduling event");
    assert_eq!(failed.type_.as_deref(), Some("Warning"));
    assert_eq!(
        failed.message.as_deref(),
        Some("binding rejected: node \"n1\" is locked")
    );
    assert!(
        events
            .iter()
            .any(|e| e.reason.as_deref() == Some("Scheduled")),
        "{events:?}"
    );
}

#[tokio::test]
async fn binds_in_flight_are_bounded() {
    let server = ApiServer::start().await.unwrap();
    let fake = fake_extender(server.url(), TlsConfig::None, keep_all()).await;
    node(&server, "n1", json!({})).await;
    node(&server, "n2", json!({})).await;
    fake.bind_rule(
        "first",
        BindRule {
            delay: Duration::from_secs(2),
            fail: 0,
        },
    );
    let cfg = SchedulerConfig {
        max_binds_in_flight: 1,
        ..config(gpu_extender(&fake))
    };
    let _sched = Scheduler::start(client(&server), cfg);
    big_pod(&server, "first").await;
    wait("the bind of first started", || async {
        (fake.binds_of("first") == 1).then_some(())
    })
    .await;
    big_pod(&server, "second").await;
    assert_eq!(
        wait("second bound", || bound_node(&server, "second")).await,
        "n2"
    );
    // second's bind waited for first's to end.
    assert_eq!(bound_node(&server, "first").await.as_deref(), Some("n1"));
}
