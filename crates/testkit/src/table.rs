//! Server-side printing: `meta.k8s.io` `Table`s as `kubectl get` asks for them, with
//! the columns the real API server's printers give each resource (priority-1
//! columns are the ones `-o wide` adds), and `PartialObjectMetadata` rows.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::resources::{self, Resource};
use crate::status::ApiError;

/// What each row carries besides its cells (`includeObject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncludeObject {
    None,
    /// `PartialObjectMetadata` (the default).
    Metadata,
    Object,
}

impl IncludeObject {
    pub fn parse(value: Option<&str>) -> Result<Self, ApiError> {
        match value.unwrap_or("") {
            "" | "Metadata" => Ok(Self::Metadata),
            "None" => Ok(Self::None),
            "Object" => Ok(Self::Object),
            other => Err(ApiError::bad_request(format!(
                "includeObject: Unsupported value: {other:?}: supported values: \"Metadata\", \"None\", \"Object\""
            ))),
        }
    }
}

/// How to print: the `meta.k8s.io` version asked for and what rows include.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableOptions {
    pub version: &'static str,
    pub include: IncludeObject,
}

type Cell = fn(&Value, DateTime<Utc>) -> Value;

struct Column {
    name: &'static str,
    ty: &'static str,
    format: &'static str,
    priority: u8,
    description: &'static str,
    cell: Cell,
}

const fn col(name: &'static str, priority: u8, description: &'static str, cell: Cell) -> Column {
    Column {
        name,
        ty: "string",
        format: "",
        priority,
        description,
        cell,
    }
}

const NAME: Column = Column {
    name: "Name",
    ty: "string",
    format: "name",
    priority: 0,
    description: "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
    cell: |o, _| s(o, "/metadata/name").into(),
};

const AGE: Column = col(
    "Age",
    0,
    "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata",
    |o, now| age(o.pointer("/metadata/creationTimestamp"), now).into(),
);

fn s<'a>(o: &'a Value, ptr: &str) -> &'a str {
    o.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}

fn or_none(v: &str) -> Value {
    if v.is_empty() { "<none>" } else { v }.into()
}

fn count(o: &Value, ptr: &str) -> usize {
    match o.pointer(ptr) {
        Some(Value::Array(a)) => a.len(),
        Some(Value::Object(m)) => m.len(),
        _ => 0,
    }
}

fn parse_time(v: Option<&Value>) -> Option<DateTime<Utc>> {
    let t = v?.as_str()?;
    DateTime::parse_from_rfc3339(t)
        .ok()
        .map(|d| d.with_timezone(&Utc))
}

/// `translateTimestampSince`: `<unknown>` for a missing time, else the age.
fn age(v: Option<&Value>, now: DateTime<Utc>) -> String {
    match parse_time(v) {
        Some(t) => human_duration(now - t),
        None => "<unknown>".into(),
    }
}

/// Go's `duration.HumanDuration`: two significant units, coarser as it grows.
pub fn human_duration(d: chrono::Duration) -> String {
    let secs = d.num_seconds();
    if secs < -1 {
        return "<invalid>".into();
    }
    if secs < 0 {
        return "0s".into();
    }
    if secs < 120 {
        return format!("{secs}s");
    }
    let minutes = secs / 60;
    if minutes < 10 {
        let rem = secs % 60;
        return if rem == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{rem}s")
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = secs / 3600;
    if hours < 8 {
        let rem = minutes % 60;
        return if rem == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{rem}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let rem = hours % 24;
        return if rem == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{rem}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let days = (hours / 24) % 365;
        return if days == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{days}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

// ---- pods -----------------------------------------------------------------

fn statuses<'a>(o: &'a Value, field: &str) -> &'a [Value] {
    o.pointer(&format!("/status/{field}"))
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn pod_ready(o: &Value, _: DateTime<Utc>) -> Value {
    let total = count(o, "/spec/containers");
    let ready = statuses(o, "containerStatuses")
        .iter()
        .filter(|c| c.get("ready").and_then(Value::as_bool) == Some(true))
        .count();
    format!("{ready}/{total}").into()
}

/// The STATUS column: the phase refined by the pod's reason and its containers'
/// waiting or terminated reasons, as kubectl users know it.
fn pod_status(o: &Value, _: DateTime<Utc>) -> Value {
    let mut reason = s(o, "/status/phase").to_string();
    if !s(o, "/status/reason").is_empty() {
        reason = s(o, "/status/reason").to_string();
    }
    let gated = o
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some("PodScheduled")
                    && c.get("reason").and_then(Value::as_str) == Some("SchedulingGated")
            })
        });
    if gated {
        reason = "SchedulingGated".into();
    }
    let init_total = count(o, "/spec/initContainers");
    let mut initializing = false;
    for (i, c) in statuses(o, "initContainerStatuses").iter().enumerate() {
        let term = c.pointer("/state/terminated");
        let exit = term.and_then(|t| t.get("exitCode")).and_then(Value::as_i64);
        if exit == Some(0) {
            continue;
        }
        initializing = true;
        let waiting = s(c, "/state/waiting/reason");
        reason = match (term, exit) {
            (Some(t), _) if !s(t, "/reason").is_empty() => format!("Init:{}", s(t, "/reason")),
            (Some(t), Some(code)) => {
                match t.get("signal").and_then(Value::as_i64).filter(|x| *x != 0) {
                    Some(sig) => format!("Init:Signal:{sig}"),
                    None => format!("Init:ExitCode:{code}"),
                }
            }
            _ if !waiting.is_empty() && waiting != "PodInitializing" => format!("Init:{waiting}"),
            _ => format!("Init:{i}/{init_total}"),
        };
        break;
    }
    if !initializing {
        let mut running = false;
        for c in statuses(o, "containerStatuses").iter().rev() {
            let waiting = s(c, "/state/waiting/reason");
            let term = c.pointer("/state/terminated");
            if !waiting.is_empty() {
                reason = waiting.to_string();
            } else if let Some(t) = term {
                reason = if !s(t, "/reason").is_empty() {
                    s(t, "/reason").to_string()
                } else {
                    match t.get("signal").and_then(Value::as_i64).filter(|x| *x != 0) {
                        Some(sig) => format!("Signal:{sig}"),
                        None => format!(
                            "ExitCode:{}",
                            t.get("exitCode").and_then(Value::as_i64).unwrap_or(0)
                        ),
                    }
                };
            } else if c.get("ready").and_then(Value::as_bool) == Some(true)
                && c.pointer("/state/running").is_some()
            {
                running = true;
            }
        }
        if reason == "Completed" && running {
            reason = "Running".into();
        }
    }
    if o.pointer("/metadata/deletionTimestamp").is_some() {
        reason = if s(o, "/status/reason") == "NodeLost" {
            "Unknown".into()
        } else {
            "Terminating".into()
        };
    }
    reason.into()
}

fn pod_restarts(o: &Value, now: DateTime<Utc>) -> Value {
    let mut restarts = 0i64;
    let mut last: Option<DateTime<Utc>> = None;
    for c in statuses(o, "containerStatuses") {
        restarts += c.get("restartCount").and_then(Value::as_i64).unwrap_or(0);
        if let Some(t) = parse_time(c.pointer("/lastState/terminated/finishedAt")) {
            last = Some(last.map_or(t, |l| l.max(t)));
        }
    }
    match last {
        Some(t) if restarts > 0 => format!("{restarts} ({} ago)", human_duration(now - t)).into(),
        _ => restarts.to_string().into(),
    }
}

fn pod_gates(o: &Value, _: DateTime<Utc>) -> Value {
    let gates: Vec<&str> = o
        .pointer("/spec/readinessGates")
        .and_then(Value::as_array)
        .map(|g| {
            g.iter()
                .filter_map(|x| x.get("conditionType").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    if gates.is_empty() {
        return "<none>".into();
    }
    let met = o
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .map_or(0, |cs| {
            cs.iter()
                .filter(|c| {
                    c.get("type")
                        .and_then(Value::as_str)
                        .is_some_and(|t| gates.contains(&t))
                        && c.get("status").and_then(Value::as_str) == Some("True")
                })
                .count()
        });
    format!("{met}/{}", gates.len()).into()
}

const POD_COLUMNS: &[Column] = &[
    NAME,
    col(
        "Ready",
        0,
        "The aggregate readiness state of this pod for accepting traffic.",
        pod_ready,
    ),
    col(
        "Status",
        0,
        "The aggregate status of the containers in this pod.",
        pod_status,
    ),
    col(
        "Restarts",
        0,
        "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
        pod_restarts,
    ),
    AGE,
    col("IP", 1, "The IP address assigned to the pod", |o, _| {
        or_none(s(o, "/status/podIP"))
    }),
    col(
        "Node",
        1,
        "The name of the node this pod is assigned to",
        |o, _| or_none(s(o, "/spec/nodeName")),
    ),
    col(
        "Nominated Node",
        1,
        "The name of the node where this pod is nominated to run",
        |o, _| or_none(s(o, "/status/nominatedNodeName")),
    ),
    col(
        "Readiness Gates",
        1,
        "The readiness gates of this pod",
        pod_gates,
    ),
];

// ---- nodes ----------------------------------------------------------------

fn node_status(o: &Value, _: DateTime<Utc>) -> Value {
    let ready = o
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| {
            cs.iter()
                .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
        });
    let mut parts = vec![
        match ready.and_then(|c| c.get("status")).and_then(Value::as_str) {
            Some("True") => "Ready",
            Some(_) => "NotReady",
            None => "Unknown",
        },
    ];
    if o.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        parts.push("SchedulingDisabled");
    }
    parts.join(",").into()
}

fn node_roles(o: &Value, _: DateTime<Utc>) -> Value {
    let mut roles: Vec<String> = Vec::new();
    if let Some(labels) = o.pointer("/metadata/labels").and_then(Value::as_object) {
        for (k, v) in labels {
            if let Some(role) = k.strip_prefix("node-role.kubernetes.io/") {
                if !role.is_empty() {
                    roles.push(role.to_string());
                }
            } else if k == "kubernetes.io/role"
                && let Some(v) = v.as_str().filter(|v| !v.is_empty())
            {
                roles.push(v.to_string());
            }
        }
    }
    roles.sort();
    roles.dedup();
    or_none(&roles.join(","))
}

fn node_address(o: &Value, ty: &str) -> Value {
    let found = o
        .pointer("/status/addresses")
        .and_then(Value::as_array)
        .and_then(|a| {
            a.iter()
                .find(|x| x.get("type").and_then(Value::as_str) == Some(ty))
        })
        .map(|x| s(x, "/address"))
        .unwrap_or("");
    or_none(found)
}

const NODE_COLUMNS: &[Column] = &[
    NAME,
    col("Status", 0, "The status of the node", node_status),
    col("Roles", 0, "The roles of the node", node_roles),
    AGE,
    col(
        "Version",
        0,
        "Kubelet Version reported by the node.",
        |o, _| s(o, "/status/nodeInfo/kubeletVersion").into(),
    ),
    col(
        "Internal-IP",
        1,
        "List of addresses reachable to the node. Queried from cloud provider, if available.",
        |o, _| node_address(o, "InternalIP"),
    ),
    col(
        "External-IP",
        1,
        "List of addresses reachable to the node. Queried from cloud provider, if available.",
        |o, _| node_address(o, "ExternalIP"),
    ),
    col(
        "OS-Image",
        1,
        "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).",
        |o, _| or_unknown(s(o, "/status/nodeInfo/osImage")),
    ),
    col(
        "Kernel-Version",
        1,
        "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
        |o, _| or_unknown(s(o, "/status/nodeInfo/kernelVersion")),
    ),
    col(
        "Container-Runtime",
        1,
        "Container runtime version reported by the node through runtime remote API (e.g. containerd://1.4.2).",
        |o, _| or_unknown(s(o, "/status/nodeInfo/containerRuntimeVersion")),
    ),
];

fn or_unknown(v: &str) -> Value {
    if v.is_empty() { "<unknown>" } else { v }.into()
}

// ---- events ---------------------------------------------------------------

fn event_first(o: &Value) -> Option<&Value> {
    o.get("firstTimestamp")
        .filter(|v| !v.is_null())
        .or_else(|| o.get("eventTime").filter(|v| !v.is_null()))
}

fn event_last(o: &Value) -> Option<&Value> {
    o.get("lastTimestamp")
        .filter(|v| !v.is_null())
        .or_else(|| o.pointer("/series/lastObservedTime"))
        .or_else(|| event_first(o))
}

fn event_count(o: &Value) -> i64 {
    o.pointer("/series/count")
        .and_then(Value::as_i64)
        .or_else(|| o.get("count").and_then(Value::as_i64))
        .unwrap_or(1)
}

fn event_last_seen(o: &Value, now: DateTime<Utc>) -> Value {
    let last = age(event_last(o), now);
    let n = event_count(o);
    if n > 1 {
        format!("{last} (x{n} over {})", age(event_first(o), now)).into()
    } else {
        last.into()
    }
}

fn event_source(o: &Value, _: DateTime<Utc>) -> Value {
    let component = match s(o, "/source/component") {
        "" => s(o, "/reportingComponent"),
        c => c,
    };
    let host = s(o, "/source/host");
    match (component, host) {
        ("", _) => "<none>".into(),
        (c, "") => c.into(),
        (c, h) => format!("{c}, {h}").into(),
    }
}

const EVENT_COLUMNS: &[Column] = &[
    col(
        "Last Seen",
        0,
        "The time at which the most recent occurrence of this event was recorded.",
        event_last_seen,
    ),
    col(
        "Type",
        0,
        "Type of this event (Normal, Warning), new types could be added in the future.",
        |o, _| s(o, "/type").into(),
    ),
    col(
        "Reason",
        0,
        "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.",
        |o, _| s(o, "/reason").into(),
    ),
    col(
        "Object",
        0,
        "The object that this event is about.",
        |o, _| {
            format!(
                "{}/{}",
                s(o, "/involvedObject/kind").to_ascii_lowercase(),
                s(o, "/involvedObject/name")
            )
            .into()
        },
    ),
    col(
        "Subobject",
        1,
        "The subobject (fieldPath) this event is about.",
        |o, _| s(o, "/involvedObject/fieldPath").into(),
    ),
    col(
        "Source",
        1,
        "The component reporting this event.",
        event_source,
    ),
    col(
        "Message",
        0,
        "A human-readable description of the status of this operation.",
        |o, _| s(o, "/message").trim().into(),
    ),
    col(
        "First Seen",
        1,
        "The time at which the event was first recorded.",
        |o, now| age(event_first(o), now).into(),
    ),
    Column {
        ty: "integer",
        ..col(
            "Count",
            1,
            "The number of times this event has occurred.",
            |o, _| event_count(o).into(),
        )
    },
    Column {
        format: "name",
        ..col("Name", 1, "The name of the event.", |o, _| {
            s(o, "/metadata/name").into()
        })
    },
];

// ---- the others -----------------------------------------------------------

const NAMESPACE_COLUMNS: &[Column] = &[
    NAME,
    col("Status", 0, "The status of the namespace", |o, _| {
        s(o, "/status/phase").into()
    }),
    AGE,
];

const LEASE_COLUMNS: &[Column] = &[
    NAME,
    col("Holder", 0, "The holder of the lease", |o, _| {
        s(o, "/spec/holderIdentity").into()
    }),
    AGE,
];

const CONFIG_MAP_COLUMNS: &[Column] = &[
    NAME,
    Column {
        ty: "string",
        ..col(
            "Data",
            0,
            "Number of entries in data and binaryData",
            |o, _| (count(o, "/data") + count(o, "/binaryData")).into(),
        )
    },
    AGE,
];

const SECRET_COLUMNS: &[Column] = &[
    NAME,
    col("Type", 0, "The type of the secret", |o, _| {
        s(o, "/type").into()
    }),
    col("Data", 0, "The number of entries in data", |o, _| {
        count(o, "/data").into()
    }),
    AGE,
];

fn service_ports(o: &Value, _: DateTime<Utc>) -> Value {
    let ports: Vec<String> = o
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .map(|ps| {
            ps.iter()
                .map(|p| {
                    let port = p.get("port").and_then(Value::as_i64).unwrap_or(0);
                    let proto = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
                    match p.get("nodePort").and_then(Value::as_i64) {
                        Some(np) if np > 0 => format!("{port}:{np}/{proto}"),
                        _ => format!("{port}/{proto}"),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    or_none(&ports.join(","))
}

const SERVICE_COLUMNS: &[Column] = &[
    NAME,
    col("Type", 0, "The type of the service", |o, _| {
        s(o, "/spec/type").into()
    }),
    col("Cluster-IP", 0, "The cluster IP of the service", |o, _| {
        or_none(s(o, "/spec/clusterIP"))
    }),
    col(
        "External-IP",
        0,
        "The external IPs of the service",
        |o, _| {
            let ips: Vec<&str> = o
                .pointer("/spec/externalIPs")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            or_none(&ips.join(","))
        },
    ),
    col("Port(s)", 0, "The ports of the service", service_ports),
    AGE,
    col("Selector", 1, "The selector of the service", |o, _| {
        let sel: Vec<String> = o
            .pointer("/spec/selector")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                    .collect()
            })
            .unwrap_or_default();
        or_none(&sel.join(","))
    }),
];

const SERVICE_ACCOUNT_COLUMNS: &[Column] = &[
    NAME,
    Column {
        ty: "string",
        ..col(
            "Secrets",
            0,
            "The number of secrets of the service account",
            |o, _| count(o, "/secrets").into(),
        )
    },
    AGE,
];

const WEBHOOK_CONFIGURATION_COLUMNS: &[Column] = &[
    NAME,
    Column {
        ty: "integer",
        ..col(
            "Webhooks",
            0,
            "The number of webhooks in the configuration",
            |o, _| count(o, "/webhooks").into(),
        )
    },
    AGE,
];

const DEFAULT_COLUMNS: &[Column] = &[
    NAME,
    Column {
        ty: "date",
        ..col(
            "Created At",
            0,
            "CreationTimestamp is a timestamp representing the server time when this object was created.",
            |o, _| s(o, "/metadata/creationTimestamp").into(),
        )
    },
];

fn columns(res: &Resource) -> &'static [Column] {
    match res.id {
        id if id == resources::PODS.id => POD_COLUMNS,
        id if id == resources::NODES.id => NODE_COLUMNS,
        id if id == resources::EVENTS.id => EVENT_COLUMNS,
        id if id == resources::NAMESPACES.id => NAMESPACE_COLUMNS,
        id if id == resources::LEASES.id => LEASE_COLUMNS,
        id if id == resources::CONFIG_MAPS.id => CONFIG_MAP_COLUMNS,
        id if id == resources::SECRETS.id => SECRET_COLUMNS,
        id if id == resources::SERVICES.id => SERVICE_COLUMNS,
        id if id == resources::SERVICE_ACCOUNTS.id => SERVICE_ACCOUNT_COLUMNS,
        id if id == resources::MUTATING_WEBHOOK_CONFIGURATIONS.id => WEBHOOK_CONFIGURATION_COLUMNS,
        _ => DEFAULT_COLUMNS,
    }
}

/// `PartialObjectMetadata` of an object.
pub fn partial_metadata(obj: &Value, version: &str) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": format!("meta.k8s.io/{version}"),
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

/// `PartialObjectMetadataList` for a list answer.
pub fn partial_metadata_list(list: &Value, version: &str) -> Value {
    let items: Vec<Value> = list
        .get("items")
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|o| partial_metadata(o, version)).collect())
        .unwrap_or_default();
    json!({
        "kind": "PartialObjectMetadataList",
        "apiVersion": format!("meta.k8s.io/{version}"),
        "metadata": list.get("metadata").cloned().unwrap_or_else(|| json!({})),
        "items": items,
    })
}

/// A `Table` of `objects`. `list_meta` is the list's metadata (resourceVersion,
/// continue) or, for a single object, an empty map with its resourceVersion.
pub fn table(
    res: &Resource,
    objects: &[Value],
    list_meta: Value,
    opts: TableOptions,
    with_headers: bool,
) -> Value {
    let now = Utc::now();
    let cols = columns(res);
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let cells: Vec<Value> = cols.iter().map(|c| (c.cell)(o, now)).collect();
            let mut row = json!({"cells": cells});
            match opts.include {
                IncludeObject::None => {}
                IncludeObject::Metadata => row["object"] = partial_metadata(o, opts.version),
                IncludeObject::Object => row["object"] = o.clone(),
            }
            row
        })
        .collect();
    let mut out = json!({
        "kind": "Table",
        "apiVersion": format!("meta.k8s.io/{}", opts.version),
        "metadata": list_meta,
        "rows": rows,
    });
    if with_headers {
        out["columnDefinitions"] = cols
            .iter()
            .map(|c| {
                json!({
                    "name": c.name,
                    "type": c.ty,
                    "format": c.format,
                    "description": c.description,
                    "priority": c.priority,
                })
            })
            .collect();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> TableOptions {
        TableOptions {
            version: "v1",
            include: IncludeObject::Metadata,
        }
    }

    #[test]
    fn human_durations_match_go() {
        let d = chrono::Duration::seconds;
        for (secs, want) in [
            (-5, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (119, "119s"),
            (120, "2m"),
            (125, "2m5s"),
            (600, "10m"),
            (179 * 60, "179m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 60 * 7, "3h7m"),
            (30 * 3600, "30h"),
            (3 * 86400, "3d"),
            (3 * 86400 + 5 * 3600, "3d5h"),
            (100 * 86400, "100d"),
            (3 * 365 * 86400, "3y"),
            (3 * 365 * 86400 + 86400 * 4, "3y4d"),
            (10 * 365 * 86400, "10y"),
        ] {
            assert_eq!(human_duration(d(secs)), want, "{secs}s");
        }
    }

    #[test]
    fn pod_rows() {
        let pod = json!({
            "metadata": {"name": "p", "creationTimestamp": "2020-01-01T00:00:00Z"},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}], "nodeName": "n1"},
            "status": {"phase": "Running", "podIP": "10.0.0.1", "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 2, "state": {"running": {}}},
                {"name": "b", "ready": false, "restartCount": 1, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
            ]}
        });
        let t = table(&resources::PODS, &[pod], json!({}), opts(), true);
        let cells = &t["rows"][0]["cells"];
        assert_eq!(cells[0], "p");
        assert_eq!(cells[1], "1/2");
        assert_eq!(cells[2], "CrashLoopBackOff");
        assert_eq!(cells[3], "3");
        assert_eq!(cells[5], "10.0.0.1");
        assert_eq!(cells[6], "n1");
        assert_eq!(cells[7], "<none>");
        assert_eq!(t["columnDefinitions"][1]["name"], "Ready");
        assert_eq!(t["columnDefinitions"][5]["priority"], 1);
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    }

    #[test]
    fn pending_and_terminating_pods() {
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}]}, "status": {"phase": "Pending"}});
        let status = |p: &Value| pod_status(p, Utc::now());
        assert_eq!(status(&pod), "Pending");
        pod["metadata"]["deletionTimestamp"] = "2020-01-01T00:00:00Z".into();
        assert_eq!(status(&pod), "Terminating");
        let init = json!({"metadata": {"name": "p"}, "spec": {"initContainers": [{"name": "i"}], "containers": [{"name": "a"}]},
            "status": {"phase": "Pending", "initContainerStatuses": [{"name": "i", "state": {"running": {}}}]}});
        assert_eq!(status(&init), "Init:0/1");
    }

    #[test]
    fn node_rows() {
        let node = json!({
            "metadata": {"name": "n", "labels": {"node-role.kubernetes.io/control-plane": "", "x": "y"}},
            "spec": {"unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "nodeInfo": {"kubeletVersion": "v1.36.0"},
                       "addresses": [{"type": "InternalIP", "address": "10.1.1.1"}]}
        });
        let t = table(&resources::NODES, &[node], json!({}), opts(), false);
        let cells = &t["rows"][0]["cells"];
        assert_eq!(cells[1], "Ready,SchedulingDisabled");
        assert_eq!(cells[2], "control-plane");
        assert_eq!(cells[3], "<unknown>");
        assert_eq!(cells[4], "v1.36.0");
        assert_eq!(cells[5], "10.1.1.1");
        assert_eq!(cells[6], "<none>");
        assert!(t.get("columnDefinitions").is_none());
        let bare = json!({"metadata": {"name": "m"}});
        let cells =
            table(&resources::NODES, &[bare], json!({}), opts(), false)["rows"][0]["cells"].clone();
        assert_eq!(cells[1], "Unknown");
        assert_eq!(cells[2], "<none>");
    }

    #[test]
    fn event_rows() {
        let now = Utc::now();
        let ev = json!({
            "metadata": {"name": "e1"},
            "type": "Warning", "reason": "FailedScheduling", "message": "0/2 nodes are available\n",
            "involvedObject": {"kind": "Pod", "name": "p"},
            "source": {"component": "hami-scheduler"},
            "count": 3,
            "firstTimestamp": (now - chrono::Duration::seconds(300)).to_rfc3339(),
            "lastTimestamp": (now - chrono::Duration::seconds(10)).to_rfc3339(),
        });
        let t = table(&resources::EVENTS, &[ev], json!({}), opts(), true);
        let cells = &t["rows"][0]["cells"];
        let last = cells[0].as_str().unwrap();
        assert!(last.ends_with("(x3 over 5m)"), "{last}");
        assert_eq!(cells[3], "pod/p");
        assert_eq!(cells[5], "hami-scheduler");
        assert_eq!(cells[6], "0/2 nodes are available");
        assert_eq!(cells[8], 3);
    }

    #[test]
    fn include_object_values() {
        assert_eq!(IncludeObject::parse(None).unwrap(), IncludeObject::Metadata);
        assert_eq!(
            IncludeObject::parse(Some("Object")).unwrap(),
            IncludeObject::Object
        );
        assert!(IncludeObject::parse(Some("All")).is_err());
    }
}
