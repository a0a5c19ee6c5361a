//! What /filter tells about its candidates: why each node failed (FailedNodes), and the
//! FilteringSucceed / FilteringFailed event texts, in HAMi's words.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::Write as _;

use hami_core::fit::FitFailure;
use hami_core::reason::{NODE_INSUFFICIENT_DEVICE, Reason};

/// Nodes named in one event (per reason) before the list is cut short.
pub const EVENT_NODES: usize = 10;

/// Why one candidate node cannot take the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeFailure {
    /// The pod's request does not fit the node's devices.
    Fit(FitFailure),
    /// The node cannot take any pod (unknown, unregistered, devices unavailable); the
    /// reason as kube-scheduler shows it.
    Unusable(String),
}

impl NodeFailure {
    /// The FailedNodes text: HAMi's reason string (`1/2 CardInsufficientMemory, 1/2
    /// CardNotHealth`, `NodeInsufficientDevice`) or the unusable node's reason.
    pub fn render(&self) -> String {
        match self {
            NodeFailure::Fit(f) => f.render(),
            NodeFailure::Unusable(reason) => reason.clone(),
        }
    }

    /// The reason names the summary groups nodes by: each device reason of a misfit
    /// (without its `<count>/<devices>`; a quota refusal with its numbers), or the whole
    /// node-level reason.
    fn reason_names(&self) -> Vec<Cow<'_, str>> {
        match self {
            NodeFailure::Fit(FitFailure::InsufficientDevices) => {
                vec![Cow::Borrowed(NODE_INSUFFICIENT_DEVICE)]
            }
            NodeFailure::Fit(FitFailure::Devices { counts, quota, .. }) => {
                let names: Vec<Cow<'_, str>> = Reason::ALL
                    .iter()
                    .filter(|r| counts.get(**r) > 0)
                    .map(|r| match (r, quota) {
                        (Reason::ResourceQuotaNotFit, Some(q)) => {
                            Cow::Owned(format!("{} ({q})", r.as_str()))
                        }
                        _ => Cow::Borrowed(r.as_str()),
                    })
                    .collect();
                if names.is_empty() {
                    // Nothing counted renders as the empty reason; it is grouped as such.
                    vec![Cow::Borrowed("")]
                } else {
                    names
                }
            }
            NodeFailure::Unusable(reason) => vec![Cow::Borrowed(reason.as_str())],
        }
    }
}

/// FailedNodes: node → reason text.
pub fn failed_nodes(failures: &BTreeMap<String, NodeFailure>) -> BTreeMap<String, String> {
    failures
        .iter()
        .map(|(node, f)| (node.clone(), f.render()))
        .collect()
}

/// HAMi's FilteringFailed text, nodes grouped by reason name: `no available node, 3
/// nodes do not meet: 2 nodes CardInsufficientMemory(n1,n2); 1 nodes node
/// unregistered(n3)`.
pub fn failure_summary(failures: &BTreeMap<String, NodeFailure>) -> String {
    let mut by_reason: BTreeMap<Cow<'_, str>, Vec<&str>> = BTreeMap::new();
    for (node, failure) in failures {
        for name in failure.reason_names() {
            by_reason.entry(name).or_default().push(node);
        }
    }
    let mut out = format!("no available node, {} nodes do not meet", failures.len());
    for (i, (reason, nodes)) in by_reason.iter().enumerate() {
        out.push_str(if i == 0 { ": " } else { "; " });
        let shown: Vec<&str> = nodes.iter().take(EVENT_NODES).copied().collect();
        let more = if nodes.len() > EVENT_NODES {
            ",..."
        } else {
            ""
        };
        let _ = write!(
            out,
            "{} nodes {reason}({}{more})",
            nodes.len(),
            shown.join(",")
        );
    }
    out
}

/// HAMi's FilteringSucceed text: `find fit node(<n>), <k> nodes not fit, <m> nodes
/// fit(<n1>:<s1>,...)`, naming the first few fitting candidates.
pub fn success_message(node: &str, not_fit: usize, fits: usize, shown: &[(&str, f32)]) -> String {
    let mut list = String::new();
    for (i, (n, s)) in shown.iter().enumerate() {
        if i > 0 {
            list.push(',');
        }
        let _ = write!(list, "{n}:{s:.2}");
    }
    if fits > shown.len() {
        list.push_str(",...");
    }
    format!("find fit node({node}), {not_fit} nodes not fit, {fits} nodes fit({list})")
}

#[cfg(test)]
mod tests {
    use super::*;
    use hami_core::reason::ReasonCounts;

    fn devices(reasons: &[(Reason, u32)], devices: usize) -> NodeFailure {
        let mut counts = ReasonCounts::default();
        for (r, n) in reasons {
            counts.add(*r, *n);
        }
        NodeFailure::Fit(FitFailure::Devices {
            counts,
            devices,
            quota: None,
        })
    }

    #[test]
    fn summary_groups_nodes_by_reason() {
        let failed = BTreeMap::from([
            (
                "n1".to_string(),
                devices(
                    &[
                        (Reason::CardInsufficientMemory, 1),
                        (Reason::CardNotHealth, 1),
                    ],
                    2,
                ),
            ),
            (
                "n2".to_string(),
                devices(&[(Reason::CardInsufficientMemory, 2)], 2),
            ),
            (
                "n3".to_string(),
                NodeFailure::Unusable("node unregistered".to_string()),
            ),
        ]);
        assert_eq!(
            failed_nodes(&failed),
            BTreeMap::from([
                (
                    "n1".to_string(),
                    "1/2 CardInsufficientMemory, 1/2 CardNotHealth".to_string()
                ),
                ("n2".to_string(), "2/2 CardInsufficientMemory".to_string()),
                ("n3".to_string(), "node unregistered".to_string()),
            ])
        );
        assert_eq!(
            failure_summary(&failed),
            "no available node, 3 nodes do not meet: 2 nodes CardInsufficientMemory(n1,n2); \
             1 nodes CardNotHealth(n1); 1 nodes node unregistered(n3)"
        );
    }

    #[test]
    fn summary_names_few_nodes_per_reason_and_keeps_node_reasons_whole() {
        let mut failed: BTreeMap<String, NodeFailure> = (0..12)
            .map(|i| {
                (
                    format!("n{i:02}"),
                    NodeFailure::Fit(FitFailure::InsufficientDevices),
                )
            })
            .collect();
        let unknown = "node unknown to hami-scheduler (not watched yet, deleted, or outside --node-label-selector)";
        failed.insert("x".into(), NodeFailure::Unusable(unknown.into()));
        assert_eq!(
            failure_summary(&failed),
            format!(
                "no available node, 13 nodes do not meet: 12 nodes NodeInsufficientDevice\
                 (n00,n01,n02,n03,n04,n05,n06,n07,n08,n09,...); 1 nodes {unknown}(x)"
            )
        );
    }

    #[test]
    fn success_message_is_hamis_and_bounded() {
        let names: Vec<String> = (0..10).map(|i| format!("n{i:02}")).collect();
        let shown: Vec<(&str, f32)> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.as_str(), i as f32 / 3.0))
            .collect();
        let msg = success_message("n11", 0, 12, &shown);
        assert!(
            msg.starts_with("find fit node(n11), 0 nodes not fit, 12 nodes fit(n00:0.00,n01:0.33,"),
            "{msg}"
        );
        assert!(msg.ends_with(",...)"), "{msg}");
    }
}
