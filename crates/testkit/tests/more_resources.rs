//! Secrets, ConfigMaps, Services, ServiceAccounts, ResourceQuotas and
//! MutatingWebhookConfigurations through the real `kube::Client`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;

use futures::{StreamExt, TryStreamExt};
use hami_testkit::ApiServer;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{
    ConfigMap, Namespace, ResourceQuota, Secret, Service, ServiceAccount,
};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::{Client, Config};
use serde_json::json;

fn client(server: &ApiServer) -> Client {
    Client::try_from(Config::new(server.url().parse().unwrap())).unwrap()
}

fn code(e: kube::Error) -> u16 {
    match e {
        kube::Error::Api(s) => s.code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn secrets_fold_string_data_and_default_type() {
    let server = ApiServer::start().await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(client(&server), "kube-system");
    let s: Secret = serde_json::from_value(json!({
        "metadata": {"name": "tls"},
        "type": "kubernetes.io/tls",
        "stringData": {"tls.crt": "hello"},
        "data": {"ca.crt": "Y2E="},
    }))
    .unwrap();
    let created = secrets.create(&PostParams::default(), &s).await.unwrap();
    let data = created.data.clone().unwrap();
    assert_eq!(data["tls.crt"], ByteString(b"hello".to_vec()));
    assert_eq!(data["ca.crt"], ByteString(b"ca".to_vec()));
    assert!(created.string_data.is_none());
    assert_eq!(created.type_.as_deref(), Some("kubernetes.io/tls"));

    let plain: Secret = serde_json::from_value(json!({"metadata": {"name": "p"}})).unwrap();
    let plain = secrets
        .create(&PostParams::default(), &plain)
        .await
        .unwrap();
    assert_eq!(plain.type_.as_deref(), Some("Opaque"));

    // Replace with a stale resourceVersion: 409; with the current one: ok.
    let mut upd = created.clone();
    upd.string_data = Some(BTreeMap::from([("tls.key".to_string(), "k".to_string())]));
    let replaced = secrets
        .replace("tls", &PostParams::default(), &upd)
        .await
        .unwrap();
    assert_eq!(
        replaced.data.as_ref().unwrap()["tls.key"],
        ByteString(b"k".to_vec())
    );
    assert_eq!(
        code(
            secrets
                .replace("tls", &PostParams::default(), &upd)
                .await
                .unwrap_err()
        ),
        409
    );

    let typed = secrets
        .list(&ListParams::default().fields("type=kubernetes.io/tls"))
        .await
        .unwrap();
    assert_eq!(typed.items.len(), 1);
    secrets
        .delete("tls", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(code(secrets.get("tls").await.unwrap_err()), 404);
}

#[tokio::test]
async fn configmaps_patch_in_three_forms_and_watch() {
    let server = ApiServer::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    let mut stream = cms
        .watch(&WatchParams::default().timeout(20), "0")
        .await
        .unwrap()
        .boxed();
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "cfg", "labels": {"app": "x"}},
        "data": {"a": "1", "b": "2"},
    }))
    .unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let pp = PatchParams::default();
    cms.patch(
        "cfg",
        &pp,
        &Patch::Merge(json!({"data": {"a": null, "c": "3"}})),
    )
    .await
    .unwrap();
    cms.patch(
        "cfg",
        &pp,
        &Patch::Strategic(json!({"metadata": {"annotations": {"s": "1"}}})),
    )
    .await
    .unwrap();
    let jp: json_patch::Patch =
        serde_json::from_value(json!([{"op": "replace", "path": "/data/b", "value": "22"}]))
            .unwrap();
    let got = cms.patch("cfg", &pp, &Patch::<()>::Json(jp)).await.unwrap();
    let data = got.data.unwrap();
    assert_eq!(data.get("a"), None);
    assert_eq!(data["b"], "22");
    assert_eq!(data["c"], "3");
    assert_eq!(got.metadata.annotations.unwrap()["s"], "1");
    cms.delete("cfg", &DeleteParams::default()).await.unwrap();

    let mut kinds = Vec::new();
    while kinds.len() < 5 {
        match stream.try_next().await.unwrap().unwrap() {
            WatchEvent::Added(_) => kinds.push("ADDED"),
            WatchEvent::Modified(_) => kinds.push("MODIFIED"),
            WatchEvent::Deleted(_) => kinds.push("DELETED"),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(
        kinds,
        ["ADDED", "MODIFIED", "MODIFIED", "MODIFIED", "DELETED"]
    );
}

/// ResourceQuotas are served like kube-apiserver serves them: namespaced, listed across
/// namespaces, and watched through kube's watcher the way hami-scheduler watches them
/// (list, then watch: added, updated, deleted).
#[tokio::test]
async fn resourcequotas_list_and_watch_across_namespaces() {
    use kube::runtime::watcher::{self, Event};
    let server = ApiServer::start().await.unwrap();
    let c = client(&server);
    let quota = |ns: &str, mem: &str| -> ResourceQuota {
        serde_json::from_value(json!({
            "metadata": {"name": "gpu", "namespace": ns},
            "spec": {"hard": {"limits.nvidia.com/gpumem": mem}},
        }))
        .unwrap()
    };
    let namespaces: Api<Namespace> = Api::all(c.clone());
    for ns in ["team-a", "team-b"] {
        let n: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
        namespaces.create(&PostParams::default(), &n).await.unwrap();
    }
    let team_a: Api<ResourceQuota> = Api::namespaced(c.clone(), "team-a");
    team_a
        .create(&PostParams::default(), &quota("team-a", "8000"))
        .await
        .unwrap();
    let all: Api<ResourceQuota> = Api::all(c.clone());
    let mut events = watcher::watcher(all.clone(), watcher::Config::default()).boxed();
    // The initial list.
    let mut listed = Vec::new();
    loop {
        match events.try_next().await.unwrap().unwrap() {
            Event::Init => {}
            Event::InitApply(q) => listed.push(q.metadata.namespace.unwrap()),
            Event::InitDone => break,
            other => panic!("unexpected {other:?} during the list"),
        }
    }
    assert_eq!(listed, ["team-a"]);
    // Then changes in any namespace.
    let team_b: Api<ResourceQuota> = Api::namespaced(c.clone(), "team-b");
    team_b
        .create(&PostParams::default(), &quota("team-b", "100"))
        .await
        .unwrap();
    team_a
        .patch(
            "gpu",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"hard": {"limits.nvidia.com/gpumem": "9000"}}})),
        )
        .await
        .unwrap();
    team_b
        .delete("gpu", &DeleteParams::default())
        .await
        .unwrap();
    let mut seen = Vec::new();
    while seen.len() < 3 {
        match events.try_next().await.unwrap().unwrap() {
            Event::Apply(q) => {
                let hard = q.spec.unwrap().hard.unwrap();
                seen.push(format!(
                    "apply {}={}",
                    q.metadata.namespace.unwrap(),
                    hard["limits.nvidia.com/gpumem"].0
                ));
            }
            Event::Delete(q) => seen.push(format!("delete {}", q.metadata.namespace.unwrap())),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(
        seen,
        ["apply team-b=100", "apply team-a=9000", "delete team-b"]
    );
    assert_eq!(
        all.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );
    assert_eq!(code(team_b.get("gpu").await.unwrap_err()), 404);
}

#[tokio::test]
async fn services_get_cluster_ips_and_accounts_are_namespaced() {
    let server = ApiServer::start().await.unwrap();
    let c = client(&server);
    let svcs: Api<Service> = Api::namespaced(c.clone(), "kube-system");
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "hami-webhook"},
        "spec": {"ports": [{"port": 443, "targetPort": 9443}], "selector": {"app": "w"}},
    }))
    .unwrap();
    let a = svcs.create(&PostParams::default(), &svc).await.unwrap();
    let spec = a.spec.unwrap();
    assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
    let ip = spec.cluster_ip.unwrap();
    assert!(ip.starts_with("10.96."), "{ip}");
    let mut svc2 = svc.clone();
    svc2.metadata.name = Some("other".into());
    let b = svcs.create(&PostParams::default(), &svc2).await.unwrap();
    assert_ne!(b.spec.unwrap().cluster_ip.unwrap(), ip);

    let sas: Api<ServiceAccount> = Api::namespaced(c.clone(), "kube-system");
    let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "hami"}})).unwrap();
    sas.create(&PostParams::default(), &sa).await.unwrap();
    let in_default: Api<ServiceAccount> = Api::namespaced(c.clone(), "default");
    assert_eq!(code(in_default.get("hami").await.unwrap_err()), 404);
    let all: Api<ServiceAccount> = Api::all(c);
    assert_eq!(
        all.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );
}

#[tokio::test]
async fn mutating_webhook_configurations_are_cluster_scoped() {
    let server = ApiServer::start().await.unwrap();
    let mwcs: Api<MutatingWebhookConfiguration> = Api::all(client(&server));
    let cfg: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": "hami-webhook"},
        "webhooks": [{
            "name": "vgpu.hami.io",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "clientConfig": {"service": {"name": "hami-webhook", "namespace": "kube-system", "path": "/webhook"}},
        }],
    }))
    .unwrap();
    let created = mwcs.create(&PostParams::default(), &cfg).await.unwrap();
    assert!(created.metadata.namespace.is_none());
    // certgen's caBundle patch: a JSON patch on the first webhook.
    let jp: json_patch::Patch = serde_json::from_value(json!([
        {"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": "Y2E="}
    ]))
    .unwrap();
    let patched = mwcs
        .patch(
            "hami-webhook",
            &PatchParams::default(),
            &Patch::<()>::Json(jp),
        )
        .await
        .unwrap();
    let hooks = patched.webhooks.unwrap();
    assert_eq!(
        hooks[0].client_config.ca_bundle,
        Some(ByteString(b"ca".to_vec()))
    );
    let listed = mwcs.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1);
    mwcs.delete("hami-webhook", &DeleteParams::default())
        .await
        .unwrap();
    assert!(
        mwcs.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}
