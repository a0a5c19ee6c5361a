//! A non-blocking recorder of core/v1 Events: callers on hot paths (Filter, Bind, Allocate)
//! hand the event to a background task (a supervised [`EventWriter`]) and never wait for
//! the API server. Events are
//! best effort, as in client-go: when the queue is full or a write fails, the event is
//! dropped and logged.

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::Client;
use kube::api::{Api, PostParams};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

/// Events waiting to be written before new ones are dropped.
pub const QUEUE: usize = 1024;

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

/// Hands events to a background writer ([`Recorder::writer`]). Cheap to clone.
#[derive(Debug, Clone)]
pub struct Recorder {
    tx: mpsc::Sender<Pending>,
    dropped: Arc<AtomicU64>,
    writer: EventWriter,
}

impl Recorder {
    /// A recorder whose events [`Recorder::writer`] writes, a long-running task its owner
    /// runs supervised (until it runs, and while it restarts, events queue); `component`
    /// is the event source (e.g. `hami-scheduler`) and `instance` this process (pod name
    /// or host name).
    pub fn new(client: Client, component: &str, instance: &str) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        Recorder {
            tx,
            dropped: Arc::default(),
            writer: EventWriter {
                client,
                component: component.into(),
                instance: instance.into(),
                queue: Arc::new(tokio::sync::Mutex::new(rx)),
            },
        }
    }

    /// The task that writes the queued events.
    pub fn writer(&self) -> EventWriter {
        self.writer.clone()
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

/// Writes a [`Recorder`]'s queued events: [`EventWriter::run`] is a supervised task, and
/// a run started after another ended goes on with the same queue.
#[derive(Clone)]
pub struct EventWriter {
    client: Client,
    component: Arc<str>,
    instance: Arc<str>,
    queue: Arc<tokio::sync::Mutex<mpsc::Receiver<Pending>>>,
}

impl std::fmt::Debug for EventWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventWriter")
            .field("component", &self.component)
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

impl EventWriter {
    /// Writes events as they are queued until `stop` is cancelled; each write on a task
    /// of its own, a few at once. Never fails: a failed write is logged and dropped.
    pub async fn run(self, stop: CancellationToken) -> Result<(), std::convert::Infallible> {
        let mut queue = self.queue.clone().lock_owned().await;
        let slots = Arc::new(Semaphore::new(IN_FLIGHT));
        loop {
            let next = tokio::select! {
                () = stop.cancelled() => return Ok(()),
                next = queue.recv() => next,
            };
            let Some(p) = next else {
                // Every recorder is gone: nothing more will come.
                stop.cancelled().await;
                return Ok(());
            };
            let slot = tokio::select! {
                () = stop.cancelled() => return Ok(()),
                slot = slots.clone().acquire_owned() => slot,
            };
            let Ok(slot) = slot else {
                return Ok(());
            };
            self.write(p, slot);
        }
    }

    fn write(&self, p: Pending, slot: tokio::sync::OwnedSemaphorePermit) {
        let event = build_event(&p, &self.component, &self.instance);
        // Node events live in `default`, as kubelet's and kube-scheduler's do.
        let namespace = p
            .subject
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
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
