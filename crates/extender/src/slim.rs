//! Pods reduced to what placement and accounting read. kube-scheduler and the pod watch
//! deliver whole objects (managed fields, volumes, env, probes, status, ...); building
//! every field of every pod would cost more than placing it on a hundred nodes, and far
//! more memory while 50,000 pods are listed. Unknown fields are skipped while parsing.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodStatus, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

/// A pod as the /filter body carries it.
#[derive(Debug, Default, Deserialize)]
struct SlimPod {
    #[serde(default)]
    metadata: Option<SlimMeta>,
    #[serde(default)]
    spec: Option<SlimSpec>,
}

#[derive(Debug, Default, Deserialize)]
struct SlimMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    annotations: Option<BTreeMap<String, String>>,
}

/// What placement and accounting read of a pod spec.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlimSpec {
    containers: Option<Vec<SlimContainer>>,
    init_containers: Option<Vec<SlimContainer>>,
    node_name: Option<String>,
    scheduler_name: Option<String>,
    /// Counted in the pod's CPU and memory requests (kube-scheduler's rule).
    overhead: Option<BTreeMap<String, Quantity>>,
    /// Pod-level requests, where set.
    resources: Option<ResourceRequirements>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SlimContainer {
    name: Option<String>,
    resources: Option<ResourceRequirements>,
    restart_policy: Option<String>,
}

/// What accounting reads of a pod status.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct SlimStatus {
    phase: Option<String>,
}

impl SlimContainer {
    fn into_container(self) -> Container {
        Container {
            name: self.name.unwrap_or_default(),
            resources: self.resources,
            restart_policy: self.restart_policy,
            ..Container::default()
        }
    }
}

impl SlimSpec {
    fn into_spec(self) -> PodSpec {
        PodSpec {
            containers: self
                .containers
                .unwrap_or_default()
                .into_iter()
                .map(SlimContainer::into_container)
                .collect(),
            init_containers: self
                .init_containers
                .map(|cs| cs.into_iter().map(SlimContainer::into_container).collect()),
            node_name: self.node_name,
            scheduler_name: self.scheduler_name,
            overhead: self.overhead,
            resources: self.resources,
            ..PodSpec::default()
        }
    }
}

/// Deserializes the `Pod` of ExtenderArgs keeping only what placement reads.
pub fn slim_pod<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Pod>, D::Error> {
    let Some(slim) = Option::<SlimPod>::deserialize(d)? else {
        return Ok(None);
    };
    let meta = slim.metadata.unwrap_or_default();
    Ok(Some(Pod {
        metadata: ObjectMeta {
            name: meta.name,
            namespace: meta.namespace,
            uid: meta.uid,
            annotations: meta.annotations,
            ..ObjectMeta::default()
        },
        spec: slim.spec.map(SlimSpec::into_spec),
        status: None,
    }))
}

/// A pod as the pod watch delivers it, slimmed; a Kubernetes resource of its own so
/// kube's watcher lists and watches `pods` with it.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct WatchedPod {
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: Option<SlimSpec>,
    #[serde(default)]
    pub status: Option<SlimStatus>,
}

impl WatchedPod {
    /// The k8s-openapi pod accounting reads (only the slim fields set).
    pub fn into_pod(self) -> Pod {
        let mut metadata = self.metadata;
        // Large and of no use here.
        metadata.managed_fields = None;
        Pod {
            metadata,
            spec: self.spec.map(SlimSpec::into_spec),
            status: self.status.map(|s| PodStatus {
                phase: s.phase,
                ..PodStatus::default()
            }),
        }
    }
}

impl kube::Resource for WatchedPod {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("Pod")
    }

    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("")
    }

    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("v1")
    }

    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("pods")
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}
