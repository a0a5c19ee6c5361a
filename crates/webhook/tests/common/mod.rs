#![allow(dead_code)]
//! Pods and AdmissionReviews shaped as kube-apiserver sends them (after defaulting).

use base64::Engine;
use serde_json::{Value, json};

/// A container as the API server has defaulted it.
pub fn container(name: &str, limits: Value) -> Value {
    json!({
        "name": name,
        "image": "nvidia/cuda:12.4.0-base-ubuntu22.04",
        "command": ["sleep", "infinity"],
        "resources": { "limits": limits.clone(), "requests": limits },
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
        "volumeMounts": [{
            "name": "kube-api-access-x7k2q",
            "readOnly": true,
            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"
        }]
    })
}

/// A pod with `containers`, defaulted by the API server (schedulerName
/// default-scheduler, tolerations, …) and carrying a field newer than k8s-openapi
/// knows, which the patch must leave alone.
pub fn pod(containers: Vec<Value>) -> Value {
    json!({
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "generateName": "gpu-job-",
            "namespace": "team-a",
            "creationTimestamp": null,
            "labels": { "app": "gpu-job" },
            "annotations": { "nvidia.com/use-gputype": "A100" },
            "managedFields": [{
                "manager": "kubectl-create",
                "operation": "Update",
                "apiVersion": "v1",
                "time": "2026-11-22T08:00:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": { "f:spec": { "f:containers": {} } }
            }]
        },
        "spec": {
            "volumes": [{
                "name": "kube-api-access-x7k2q",
                "projected": { "sources": [{ "serviceAccountToken": { "expirationSeconds": 3607, "path": "token" } }], "defaultMode": 420 }
            }],
            "containers": containers,
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "serviceAccount": "default",
            "securityContext": {},
            "schedulerName": "default-scheduler",
            "tolerations": [
                { "key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300 }
            ],
            "priority": 0,
            "enableServiceLinks": true,
            "preemptionPolicy": "PreemptLowerPriority",
            "futureFieldFromANewerApiServer": { "kept": true }
        },
        "status": {}
    })
}

/// An AdmissionReview request as kube-apiserver sends it for a pod CREATE.
pub fn review(api_version: &str, uid: &str, object: Value) -> Value {
    json!({
        "kind": "AdmissionReview",
        "apiVersion": api_version,
        "request": {
            "uid": uid,
            "kind": { "group": "", "version": "v1", "kind": "Pod" },
            "resource": { "group": "", "version": "v1", "resource": "pods" },
            "requestKind": { "group": "", "version": "v1", "kind": "Pod" },
            "requestResource": { "group": "", "version": "v1", "resource": "pods" },
            "namespace": "team-a",
            "operation": "CREATE",
            "userInfo": {
                "username": "kubernetes-admin",
                "groups": ["kubeadm:cluster-admins", "system:authenticated"]
            },
            "object": object,
            "oldObject": null,
            "dryRun": false,
            "options": { "kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1", "fieldManager": "kubectl-create" }
        }
    })
}

/// The JSON Patch inside a response, decoded.
pub fn decoded_patch(response: &Value) -> Option<json_patch::Patch> {
    let b64 = response["response"]["patch"].as_str()?;
    assert_eq!(response["response"]["patchType"], "JSONPatch");
    let raw = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
    serde_json::from_slice(&raw).ok()
}

/// `original` with the response's patch applied.
pub fn patched(original: &Value, response: &Value) -> Value {
    let mut doc = original.clone();
    if let Some(p) = decoded_patch(response) {
        json_patch::patch(&mut doc, &p).expect("patch applies to the original");
    }
    doc
}
