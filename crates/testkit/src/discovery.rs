//! Discovery: `/version`, `/api`, `/apis`, the per-group-version resource lists and
//! the aggregated form (`apidiscovery.k8s.io/v2`) that kubectl 1.30+ asks for first.
//! Everything is derived from [`resources::ALL`], so a resource type added there is
//! discoverable without further work.

use serde_json::{Value, json};

use crate::negotiate::{self, Wanted};
use crate::openapi;
use crate::resources::{self, Resource};
use crate::status::ApiError;

/// The Kubernetes version the emulator reports. The served APIs are the stable
/// v1 ones, identical across the releases kubectl 1.37 supports talking to.
pub const MAJOR: &str = "1";
pub const MINOR: &str = "36";
pub const GIT_VERSION: &str = "v1.36.0";

/// The `Content-Type` of an aggregated discovery document.
pub fn aggregated_content_type(version: &str) -> String {
    format!("application/json;g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList")
}

/// A discovery answer: the body and its content type.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    pub body: Value,
    pub content_type: String,
}

fn json_doc(body: Value) -> Document {
    Document {
        body,
        content_type: "application/json".into(),
    }
}

/// Answers a discovery path, or `None` when `path` is not one.
/// `server_address` goes into `serverAddressByClientCIDRs` as the real server does.
pub fn handle(
    path: &str,
    accept: &str,
    server_address: &str,
) -> Option<Result<Document, ApiError>> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let groups = resources::groups();
    let known_version = |g: &str, v: &str| resources::in_group_version(g, v).next().is_some();
    Some(match segs.as_slice() {
        ["version"] => negotiate::for_plain_json(accept).map(|()| json_doc(version())),
        ["openapi", "v3"] => negotiate::for_plain_json(accept).map(|()| json_doc(openapi::index())),
        ["openapi", "v3", rest @ ..] => match openapi::for_path(&rest.join("/")) {
            Some(doc) => negotiate::for_plain_json(accept).map(|()| json_doc(doc)),
            None => Err(ApiError::NotFound {
                message: format!("the server could not find the requested resource ({path})"),
            }),
        },
        ["api"] => negotiate::for_discovery(accept).map(|w| match w {
            Wanted::AggregatedDiscovery(v) => aggregated(&[""], v),
            _ => json_doc(json!({
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [
                    {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
                ],
            })),
        }),
        ["apis"] => negotiate::for_discovery(accept).map(|w| match w {
            Wanted::AggregatedDiscovery(v) => aggregated(&groups, v),
            _ => json_doc(json!({
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": groups
                    .iter()
                    .map(|g| api_group(g, server_address))
                    .collect::<Vec<_>>(),
            })),
        }),
        ["apis", g] if groups.contains(g) => negotiate::for_plain_json(accept).map(|()| {
            let mut body = api_group(g, server_address);
            body["kind"] = "APIGroup".into();
            body["apiVersion"] = "v1".into();
            json_doc(body)
        }),
        ["api", "v1"] => {
            negotiate::for_plain_json(accept).map(|()| json_doc(resource_list("", "v1")))
        }
        ["apis", g, v] if known_version(g, v) => {
            negotiate::for_plain_json(accept).map(|()| json_doc(resource_list(g, v)))
        }
        _ => return None,
    })
}

/// `version.Info` as `GET /version` returns it.
pub fn version() -> Value {
    json!({
        "major": MAJOR,
        "minor": MINOR,
        "emulationMajor": MAJOR,
        "emulationMinor": MINOR,
        "minCompatibilityMajor": MAJOR,
        "minCompatibilityMinor": MINOR,
        "gitVersion": GIT_VERSION,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.25.0",
        "compiler": "gc",
        "platform": format!("{}/{}", go_os(), go_arch()),
    })
}

fn go_os() -> &'static str {
    std::env::consts::OS
}

fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

fn versions_of(group: &str) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for r in resources::ALL.iter().filter(|r| r.group == group) {
        if !out.contains(&r.version) {
            out.push(r.version);
        }
    }
    out
}

fn api_group(group: &str, server_address: &str) -> Value {
    let versions: Vec<Value> = versions_of(group)
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({
        "name": group,
        "preferredVersion": versions.first().cloned().unwrap_or(Value::Null),
        "versions": versions,
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    })
}

fn group_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    }
}

/// The legacy `APIResourceList` of one group/version: each resource, then each of
/// its subresources as `plural/sub`.
pub fn resource_list(group: &str, version: &str) -> Value {
    let mut list = Vec::new();
    for r in resources::in_group_version(group, version) {
        let mut entry = json!({
            "name": r.plural,
            "singularName": r.singular(),
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": r.verbs(),
        });
        if !r.short_names.is_empty() {
            entry["shortNames"] = json!(r.short_names);
        }
        if !r.categories.is_empty() {
            entry["categories"] = json!(r.categories);
        }
        list.push(entry);
        for s in r.subresources {
            list.push(json!({
                "name": format!("{}/{}", r.plural, s.name),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": s.kind.unwrap_or(r.kind),
                "verbs": s.verbs,
            }));
        }
    }
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version(group, version),
        "resources": list,
    })
}

fn gvk(r: &Resource, kind: &str) -> Value {
    json!({"group": r.group, "version": r.version, "kind": kind})
}

fn resource_discovery(r: &Resource) -> Value {
    let mut entry = json!({
        "resource": r.plural,
        "responseKind": gvk(r, r.kind),
        "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": r.singular(),
        "verbs": r.verbs(),
    });
    if !r.short_names.is_empty() {
        entry["shortNames"] = json!(r.short_names);
    }
    if !r.categories.is_empty() {
        entry["categories"] = json!(r.categories);
    }
    if !r.subresources.is_empty() {
        entry["subresources"] = r
            .subresources
            .iter()
            .map(|s| {
                json!({
                    "subresource": s.name,
                    "responseKind": gvk(r, s.kind.unwrap_or(r.kind)),
                    "verbs": s.verbs,
                })
            })
            .collect();
    }
    entry
}

/// `APIGroupDiscoveryList` for `groups` ("" is the core group, served at `/api`).
pub fn aggregated(groups: &[&str], version: &'static str) -> Document {
    let items: Vec<Value> = groups
        .iter()
        .map(|g| {
            let versions: Vec<Value> = versions_of(g)
                .iter()
                .map(|v| {
                    json!({
                        "version": v,
                        "resources": resources::in_group_version(g, v)
                            .map(resource_discovery)
                            .collect::<Vec<_>>(),
                        "freshness": "Current",
                    })
                })
                .collect();
            let metadata = if g.is_empty() {
                json!({"creationTimestamp": null})
            } else {
                json!({"name": g, "creationTimestamp": null})
            };
            json!({"metadata": metadata, "versions": versions})
        })
        .collect();
    Document {
        body: json!({
            "kind": "APIGroupDiscoveryList",
            "apiVersion": format!("apidiscovery.k8s.io/{version}"),
            "metadata": {},
            "items": items,
        }),
        content_type: aggregated_content_type(version),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &Value) -> Vec<String> {
        v["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn core_resource_list_has_pods_nodes_and_subresources() {
        let doc = handle("/api/v1", "application/json", "127.0.0.1:1")
            .unwrap()
            .unwrap();
        let names = names(&doc.body);
        for n in [
            "pods",
            "pods/binding",
            "pods/status",
            "nodes",
            "nodes/status",
            "events",
            "namespaces",
        ] {
            assert!(names.contains(&n.to_string()), "{n} in {names:?}");
        }
        assert!(!names.iter().any(|n| n.starts_with("leases")));
        let pods = &doc.body["resources"][0];
        assert_eq!(pods["shortNames"], json!(["po"]));
        assert_eq!(pods["namespaced"], true);
    }

    #[test]
    fn unknown_paths_are_not_discovery() {
        assert!(handle("/api/v2", "", "a").is_none());
        assert!(handle("/apis/apps/v1", "", "a").is_none());
        assert!(handle("/apis/coordination.k8s.io/v2", "", "a").is_none());
        assert!(handle("/api/v1/pods", "", "a").is_none());
    }

    #[test]
    fn aggregated_lists_every_group() {
        let kubectl =
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
        let doc = handle("/apis", kubectl, "a").unwrap().unwrap();
        assert_eq!(doc.content_type, aggregated_content_type("v2"));
        let groups: Vec<&str> = doc.body["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            groups,
            ["coordination.k8s.io", "admissionregistration.k8s.io"]
        );
        let core = handle("/api", kubectl, "a").unwrap().unwrap();
        let pods = &core.body["items"][0]["versions"][0]["resources"][0];
        assert_eq!(pods["resource"], "pods");
        assert_eq!(pods["scope"], "Namespaced");
        assert_eq!(pods["subresources"][0]["responseKind"]["kind"], "Binding");
    }
}
