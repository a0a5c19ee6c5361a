//! GPU pair scores of a node (`hami.io/node-nvidia-score`), published by the NVIDIA device
//! plugin when topology-aware scheduling is on:
//!
//! ```json
//! [{"uuid":"GPU-0","score":{"GPU-1":50,"GPU-2":20}}, ...]
//! ```
//!
//! Higher means better connected (NVLink counts 100 per link, PCIe levels 10–60). The
//! scheduler reads pair scores to keep well-connected GPUs together for multi-GPU pods.

use std::collections::{BTreeMap, HashMap};

use super::error::CodecError;
use super::json::{self, Entry, ObjectWriter};

const WHAT: &str = "node topology score";

/// The scores from one GPU to its peers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeviceTopologyScore {
    pub uuid: String,
    /// Peer UUID → score. Sorted, as Go writes map keys.
    pub score: BTreeMap<String, i64>,
}

/// Decodes the annotation. The empty string and `null` mean no scores (every pair scores 0).
/// Missing or `null` fields are empty, unknown keys are ignored; a non-integer score is an
/// error naming the entry and peer.
pub fn decode_topology_scores(value: &str) -> Result<Vec<DeviceTopologyScore>, CodecError> {
    if value.is_empty() {
        return Ok(Vec::new());
    }
    json::parse_array(WHAT, value)?
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let obj = Entry::top(WHAT, i, item)?;
            Ok(DeviceTopologyScore {
                uuid: obj.string("uuid")?,
                score: obj.int_map("score")?.into_iter().collect(),
            })
        })
        .collect()
}

/// Encodes as the plugin does: `uuid` then `score`, peers in sorted order.
pub fn encode_topology_scores(scores: &[DeviceTopologyScore]) -> String {
    let mut out = String::new();
    json::write_array(&mut out, scores, |out, device| {
        let mut obj = ObjectWriter::begin(out);
        obj.str("uuid", &device.uuid);
        let peers = obj.nested("score");
        let mut peer_obj = ObjectWriter::begin(peers);
        for (peer, score) in &device.score {
            peer_obj.num(peer, score);
        }
        peer_obj.end();
        obj.end();
    });
    out
}

/// Pair-score lookup for the placement engine.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PairScores {
    scores: HashMap<String, HashMap<String, i64>>,
}

impl PairScores {
    /// Indexes decoded scores. If a GPU appears twice, its later entry wins per peer.
    pub fn new(scores: &[DeviceTopologyScore]) -> Self {
        let mut index: HashMap<String, HashMap<String, i64>> = HashMap::new();
        for device in scores {
            let peers = index.entry(device.uuid.clone()).or_default();
            peers.extend(device.score.iter().map(|(k, v)| (k.clone(), *v)));
        }
        PairScores { scores: index }
    }

    /// The score from `a` to `b` as published (the plugin publishes both directions); a pair
    /// nobody published scores 0, as in HAMi.
    pub fn score(&self, a: &str, b: &str) -> i64 {
        self.scores
            .get(a)
            .and_then(|peers| peers.get(b))
            .copied()
            .unwrap_or(0)
    }

    /// Whether no score was published at all.
    pub fn is_empty(&self) -> bool {
        self.scores.values().all(HashMap::is_empty)
    }
}
