//! Events as kube-scheduler's recorder leaves them in `core/v1`: one Event per
//! (pod, reason, message), its `count` and `lastTimestamp` bumped on repeats.

use std::collections::HashMap;
use std::sync::Mutex;

use hami_core::sync::MutexExt;

use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

/// (pod uid, reason, message) → (event name, count).
type Seen = HashMap<(String, String, String), (String, i64)>;

pub struct Recorder {
    client: Client,
    component: String,
    /// Shared by the binding tasks.
    seen: Mutex<Seen>,
}

fn now() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("component", &self.component)
            .field("events", &self.seen.lock_unpoisoned().len())
            .finish()
    }
}

impl Recorder {
    pub fn new(client: Client, component: &str) -> Self {
        Self {
            client,
            component: component.to_string(),
            seen: Mutex::default(),
        }
    }

    /// Records `reason`/`message` about `pod`; failures are logged, never fatal,
    /// as for kube-scheduler.
    pub async fn record(&self, pod: &Pod, type_: &str, reason: &str, message: &str) {
        let ns = pod.namespace().unwrap_or_default();
        let uid = pod.uid().unwrap_or_default();
        let events: Api<Event> = Api::namespaced(self.client.clone(), &ns);
        let key = (uid.clone(), reason.to_string(), message.to_string());
        let seen = self.seen.lock_unpoisoned().get(&key).cloned();
        if let Some((name, count)) = seen {
            let patch = json!({"count": count + 1, "lastTimestamp": now()});
            match events
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {
                    self.seen.lock_unpoisoned().insert(key, (name, count + 1));
                    return;
                }
                Err(e) => {
                    tracing::debug!(event = %name, error = %e, "event gone; recording a new one");
                }
            }
        }
        let stamp = chrono::Utc::now().timestamp_nanos_opt().unwrap_or_default();
        let name = format!("{}.{stamp:x}", pod.name_any());
        let event: Event = match serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns},
            "involvedObject": {
                "kind": "Pod", "apiVersion": "v1", "namespace": ns, "name": pod.name_any(),
                "uid": uid, "resourceVersion": pod.resource_version(),
            },
            "reason": reason,
            "message": message,
            "type": type_,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": format!("{}-emulator", self.component),
            "action": "Scheduling",
            "firstTimestamp": now(),
            "lastTimestamp": now(),
            "count": 1,
        })) {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(error = %e, "cannot build event");
                return;
            }
        };
        match events.create(&PostParams::default(), &event).await {
            Ok(_) => {
                self.seen.lock_unpoisoned().insert(key, (name, 1));
            }
            Err(e) => {
                tracing::warn!(pod = %pod.name_any(), reason, error = %e, "cannot record event")
            }
        }
    }

    /// Forgets the events of pods that are gone.
    pub fn retain_pods(&self, live: &std::collections::HashSet<String>) {
        self.seen
            .lock_unpoisoned()
            .retain(|(uid, _, _), _| live.contains(uid));
    }
}
