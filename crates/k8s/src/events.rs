//! A non-blocking recorder of core/v1 Events: callers on hot paths (Filter, Bind, Allocate)
//! hand the event to a background task and never wait for the API server. Events are
//! best effort, as in client-go: when the queue is full or a write fails, the event is
//! dropped and logged.

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::Client;
use kube::api::{Api, PostParams};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{Semaphore, mpsc};

/// Events waiting to be written before new ones are dropped.
const QUEUE: usize = 1024;

/// `Normal` or `Warning`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// The object an event is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    pub kind: &'static str,
    pub namespace: Option<String>,
    pub name: String,
    pub uid: Option<String>,
}

impl Subject {
    pub fn pod(namespace: &str, name: &str, uid: Option<&str>) -> Self {
        Subject {
            kind: "Pod",
            namespace: Some(namespace.to_string()),
            name: name.to_string(),
            uid: uid.map(str::to_string),
        }
    }

    pub fn node(name: &str, uid: Option<&str>) -> Self {
        Subject {
            kind: "Node",
            namespace: None,
            name: name.to_string(),
            uid: uid.map(str::to_string),
        }
    }
}

#[derive(Debug)]
struct Pending {
    subject: Subject,
    kind: EventType,
    reason: String,
    message: String,
}

/// Event writes in flight at once: a burst of scheduling decisions must not queue
/// behind one slow API round trip each.
const IN_FLIGHT: usize = 8;

/// Hands events to a background writer. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Recorder {
    tx: mpsc::Sender<Pending>,
    dropped: Arc<AtomicU64>,
}

impl Recorder {
    /// Starts the writer task; `component` is the event source (e.g. `hami-scheduler`)
    /// and `instance` this process (pod name or host name).
    pub fn start(client: Client, component: &str, instance: &str) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(write_events(
            client,
            component.to_string(),
            instance.to_string(),
            rx,
        ));
        Recorder {
            tx,
            dropped: Arc::default(),
        }
    }

    /// Events dropped so far because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Queues an event; never waits.
    pub fn record(
        &self,
        subject: Subject,
        kind: EventType,
        reason: &str,
        message: impl Into<String>,
    ) {
        let pending = Pending {
            subject,
            kind,
            reason: reason.to_string(),
            message: message.into(),
        };
        if self.tx.try_send(pending).is_err() {
            // One line per power of two, not one per event, during a burst.
            let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_power_of_two() {
                tracing::warn!(
                    dropped = n,
                    "event queue full; events dropped (the API server is slower than the events produced)"
                );
            }
        }
    }
}

async fn write_events(
    client: Client,
    component: String,
    instance: String,
    mut rx: mpsc::Receiver<Pending>,
) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    while let Some(p) = rx.recv().await {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let event = build_event(&p, &component, &instance);
        // Node events live in `default`, as kubelet's and kube-scheduler's do.
        let namespace = p
            .subject
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let api: Api<Event> = Api::namespaced(client.clone(), &namespace);
        tokio::spawn(async move {
            if let Err(e) = api.create(&PostParams::default(), &event).await {
                tracing::warn!(
                    error = %e,
                    reason = %p.reason,
                    object = %p.subject.name,
                    "could not write event"
                );
            }
            drop(slot);
        });
    }
}

fn build_event(p: &Pending, component: &str, instance: &str) -> Event {
    let now = k8s_openapi::jiff::Timestamp::now();
    let nanos = now.as_nanosecond();
    let namespace = p
        .subject
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    Event {
        metadata: ObjectMeta {
            // client-go's naming: `<object>.<unix nanos in hex>`.
            name: Some(format!("{}.{:x}", p.subject.name, nanos)),
            namespace: Some(namespace),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some(p.subject.kind.into()),
            namespace: p.subject.namespace.clone(),
            name: Some(p.subject.name.clone()),
            uid: p.subject.uid.clone(),
            ..ObjectReference::default()
        },
        reason: Some(p.reason.clone()),
        message: Some(p.message.clone()),
        type_: Some(p.kind.as_str().into()),
        source: Some(EventSource {
            component: Some(component.into()),
            host: None,
        }),
        reporting_component: Some(component.into()),
        reporting_instance: Some(instance.into()),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        event_time: Some(MicroTime(now)),
        count: Some(1),
        action: Some(p.reason.clone()),
        ..Event::default()
    }
}
