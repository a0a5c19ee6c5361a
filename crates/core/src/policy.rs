//! Node and GPU scheduling policies (`docs/protocol.md#scores`,
//! `docs/protocol.md#gpu-policies`).

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

/// How the node is chosen among those that fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NodePolicy {
    /// Highest node score: fill used nodes first.
    #[default]
    Binpack,
    /// Lowest node score: spread load.
    Spread,
    /// Largest drop in GPU fragmentation against the typical workload
    /// ([`crate::frag::live`]); not a HAMi policy.
    Frag,
}

impl NodePolicy {
    /// Pod annotation semantics: anything but `spread` (or our `frag`) sorts as
    /// binpack (HAMi).
    pub fn from_annotation(value: &str) -> Self {
        match value.trim() {
            "spread" => NodePolicy::Spread,
            "frag" => NodePolicy::Frag,
            _ => NodePolicy::Binpack,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            NodePolicy::Binpack => "binpack",
            NodePolicy::Spread => "spread",
            NodePolicy::Frag => "frag",
        }
    }
}

impl fmt::Display for NodePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A policy name that is not known (for flags, where a typo must not pass silently).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} policy {value:?}; expected one of: {expected}")]
pub struct PolicyParseError {
    pub kind: &'static str,
    pub value: String,
    pub expected: &'static str,
}

impl FromStr for NodePolicy {
    type Err = PolicyParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "binpack" => Ok(NodePolicy::Binpack),
            "spread" => Ok(NodePolicy::Spread),
            "frag" => Ok(NodePolicy::Frag),
            other => Err(PolicyParseError {
                kind: "node",
                value: other.to_string(),
                expected: "binpack, spread or frag",
            }),
        }
    }
}

/// A device sort key of a GPU policy chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortKey {
    /// Prefer the fullest device.
    Binpack,
    /// Prefer the emptiest device.
    Spread,
    /// Prefer by NUMA node.
    Numa,
}

/// A GPU policy: a single name or a comma chain (`hami.io/gpu-scheduler-policy`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuPolicy {
    text: String,
    keys: Vec<SortKey>,
    /// Single-name form (HAMi sorts NUMA as a tie-break there, not as a key).
    single: bool,
    /// Devices already used by anyone are skipped.
    pub mutex: bool,
    /// Choose among all fitting devices by pairwise topology score.
    pub topology_aware: bool,
    /// `frag`: device scores are the fragmentation left behind
    /// ([`crate::frag::live`]), preferred highest first like binpack.
    pub frag: bool,
}

const GPU_POLICIES: &str =
    "binpack, spread, mutex, numa, topology-aware, frag, or a comma chain of them";

impl GpuPolicy {
    /// Parses a policy the way the scheduler reads the pod annotation: unknown single
    /// names behave as `spread`, unknown chain items are ignored.
    pub fn parse_lenient(value: &str) -> Self {
        let text = value.trim().to_string();
        let items: Vec<&str> = text
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        let mutex = items.contains(&"mutex");
        let topology_aware = items.contains(&"topology-aware");
        let frag = items.contains(&"frag");
        // HAMi reads any value with a comma (even `binpack,`) and a bare `numa` as a chain.
        let single = !text.contains(',') && text != "numa";
        let mut keys = Vec::new();
        if single {
            keys.push(match items.first() {
                Some(&"binpack" | &"frag") => SortKey::Binpack,
                _ => SortKey::Spread,
            });
        } else {
            for item in &items {
                let key = match *item {
                    "binpack" | "frag" => SortKey::Binpack,
                    "spread" => SortKey::Spread,
                    "numa" => SortKey::Numa,
                    _ => continue,
                };
                if !keys.contains(&key) {
                    keys.push(key);
                }
            }
            if keys.is_empty() {
                keys.push(SortKey::Spread);
            }
        }
        GpuPolicy {
            text,
            keys,
            single,
            mutex,
            topology_aware,
            frag,
        }
    }

    /// Strict parse for flags and config: every item must be a known policy.
    pub fn parse_strict(value: &str) -> Result<Self, PolicyParseError> {
        for item in value.split(',').map(str::trim) {
            if !matches!(
                item,
                "binpack" | "spread" | "mutex" | "numa" | "topology-aware" | "frag"
            ) {
                return Err(PolicyParseError {
                    kind: "gpu",
                    value: value.to_string(),
                    expected: GPU_POLICIES,
                });
            }
        }
        Ok(Self::parse_lenient(value))
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Orders two devices by preference (the preferred one first) under this policy.
    ///
    /// HAMi sorts the node's devices ascending with a stable sort and walks the list from
    /// its end (`docs/protocol.md#gpu-policies`); this is that walk order: HAMi's keys
    /// reversed, chains' device index descending, and last the device's position in the
    /// list before the sort ([`DeviceKeys::rank`]) descending, since a stable sort keeps
    /// equal devices in that order and the walk meets the last of them first.
    pub fn prefer(&self, a: &DeviceKeys, b: &DeviceKeys, numa_bind: bool) -> Ordering {
        let by_score_desc = || b.score.total_cmp(&a.score);
        let by_score_asc = || a.score.total_cmp(&b.score);
        let by_numa_desc = || b.numa.cmp(&a.numa);
        let ord = if self.mutex && self.single {
            a.used.cmp(&b.used).then_with(by_numa_desc)
        } else if self.single {
            let binpack = self.keys.first() == Some(&SortKey::Binpack);
            match (numa_bind, binpack) {
                (false, true) => by_score_desc().then_with(by_numa_desc),
                (false, false) => by_score_asc().then_with(by_numa_desc),
                (true, true) => a.numa.cmp(&b.numa).then_with(by_score_desc),
                (true, false) => by_numa_desc().then_with(by_score_asc),
            }
        } else {
            let mut ord = if numa_bind {
                by_numa_desc()
            } else {
                Ordering::Equal
            };
            for key in &self.keys {
                ord = ord.then_with(|| match key {
                    SortKey::Binpack => by_score_desc(),
                    SortKey::Spread => by_score_asc(),
                    SortKey::Numa => by_numa_desc(),
                });
            }
            // A chain's last key is the device index, ascending in HAMi's sort.
            ord.then(b.index.cmp(&a.index))
        };
        ord.then(b.rank.cmp(&a.rank))
    }
}

impl Default for GpuPolicy {
    fn default() -> Self {
        GpuPolicy::parse_lenient("spread")
    }
}

impl FromStr for GpuPolicy {
    type Err = PolicyParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        GpuPolicy::parse_strict(s)
    }
}

/// What the device ordering looks at.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeviceKeys {
    pub score: f32,
    pub numa: i32,
    pub used: u32,
    pub index: u32,
    /// Position in HAMi's device list before this sort: registration order for a pod's
    /// first container, then the order the previous container's sort left (HAMi sorts
    /// one list in place for every container of the pod).
    pub rank: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys of a device registered at position `index` (rank = index).
    fn k(score: f32, numa: i32, used: u32, index: u32) -> DeviceKeys {
        DeviceKeys {
            score,
            numa,
            used,
            index,
            rank: index,
        }
    }

    fn order(policy: &str, numa_bind: bool, devs: &[DeviceKeys]) -> Vec<u32> {
        let p = GpuPolicy::parse_lenient(policy);
        let mut v = devs.to_vec();
        v.sort_by(|a, b| p.prefer(a, b, numa_bind));
        v.iter().map(|d| d.index).collect()
    }

    #[test]
    fn binpack_prefers_fullest_and_spread_emptiest() {
        let devs = [k(1.0, 0, 0, 0), k(5.0, 0, 1, 1), k(3.0, 0, 1, 2)];
        assert_eq!(order("binpack", false, &devs), vec![1, 2, 0]);
        assert_eq!(order("spread", false, &devs), vec![0, 2, 1]);
        // Unknown single names behave as spread, like HAMi.
        assert_eq!(order("whatever", false, &devs), vec![0, 2, 1]);
        assert_eq!(order("topology-aware", false, &devs), vec![0, 2, 1]);
    }

    #[test]
    fn equal_scores_fall_back_to_numa_then_the_last_registered() {
        let devs = [k(2.0, 0, 0, 0), k(2.0, 1, 0, 1), k(2.0, 0, 0, 2)];
        // HAMi sorts [0, 2, 1] (NUMA ascending, stable) and walks it from the end.
        assert_eq!(order("binpack", false, &devs), vec![1, 2, 0]);
    }

    /// HAMi's walk meets equal devices last-registered first, under every policy
    /// (`docs/protocol.md#gpu-policies`).
    #[test]
    fn identical_devices_are_taken_last_registered_first() {
        let devs = [k(3.0, 0, 1, 0), k(3.0, 0, 1, 1), k(3.0, 0, 1, 2)];
        for policy in [
            "binpack",
            "spread",
            "mutex",
            "topology-aware",
            "frag",
            "numa",
            "binpack,numa",
            "numa,spread",
            "spread,mutex",
            ",",
        ] {
            assert_eq!(order(policy, false, &devs), vec![2, 1, 0], "{policy}");
            assert_eq!(order(policy, true, &devs), vec![2, 1, 0], "{policy}");
        }
    }

    /// Single policies keep the list order for ties (a stable sort); chains sort by the
    /// device index last, so only there the index decides.
    #[test]
    fn ties_follow_list_order_for_single_policies_and_index_for_chains() {
        // Listed as index 2, 0, 1 (ranks 0, 1, 2).
        let devs = [
            DeviceKeys {
                rank: 0,
                ..k(1.0, 0, 0, 2)
            },
            DeviceKeys {
                rank: 1,
                ..k(1.0, 0, 0, 0)
            },
            DeviceKeys {
                rank: 2,
                ..k(1.0, 0, 0, 1)
            },
        ];
        assert_eq!(order("spread", false, &devs), vec![1, 0, 2]);
        assert_eq!(order("binpack", false, &devs), vec![1, 0, 2]);
        assert_eq!(order("binpack,numa", false, &devs), vec![2, 1, 0]);
        assert_eq!(order("numa", false, &devs), vec![2, 1, 0]);
        // Any comma makes a chain, as in HAMi.
        assert_eq!(order("binpack,", false, &devs), vec![2, 1, 0]);
    }

    #[test]
    fn mutex_prefers_idle_devices() {
        let devs = [k(9.0, 0, 2, 0), k(1.0, 0, 0, 1), k(4.0, 0, 1, 2)];
        let p = GpuPolicy::parse_lenient("mutex");
        assert!(p.mutex);
        assert_eq!(order("mutex", false, &devs), vec![1, 2, 0]);
    }

    #[test]
    fn numa_bind_makes_numa_primary() {
        let devs = [k(9.0, 0, 0, 0), k(1.0, 1, 0, 1), k(4.0, 1, 0, 2)];
        assert_eq!(order("binpack", true, &devs), vec![0, 2, 1]);
        assert_eq!(order("spread", true, &devs), vec![1, 2, 0]);
    }

    #[test]
    fn chains_apply_keys_in_written_order() {
        let devs = [k(9.0, 0, 0, 0), k(1.0, 1, 0, 1), k(4.0, 1, 0, 2)];
        assert_eq!(order("numa,binpack", false, &devs), vec![2, 1, 0]);
        assert_eq!(order("binpack,numa", false, &devs), vec![0, 2, 1]);
        // Duplicates and non-key items are ignored; mutex still applies its skip.
        let p = GpuPolicy::parse_lenient("spread,mutex,spread");
        assert!(p.mutex);
        assert_eq!(order("spread,mutex,spread", false, &devs), vec![1, 2, 0]);
    }

    #[test]
    fn strict_parse_rejects_unknown_names() {
        assert!(GpuPolicy::parse_strict("binpack").is_ok());
        assert!(GpuPolicy::parse_strict("numa,spread").is_ok());
        let err = GpuPolicy::parse_strict("binpak").unwrap_err();
        assert!(err.to_string().contains("binpak"));
        assert!("spreed".parse::<NodePolicy>().is_err());
        assert_eq!(NodePolicy::from_annotation("anything"), NodePolicy::Binpack);
        assert_eq!(NodePolicy::from_annotation(" spread "), NodePolicy::Spread);
    }

    #[test]
    fn flag_values_parse_strictly_with_the_choices_in_the_error() {
        for (text, want) in [
            ("binpack", NodePolicy::Binpack),
            ("spread", NodePolicy::Spread),
            ("frag", NodePolicy::Frag),
            (" frag ", NodePolicy::Frag),
        ] {
            assert_eq!(text.parse::<NodePolicy>(), Ok(want), "{text:?}");
        }
        let err = "tight".parse::<NodePolicy>().unwrap_err().to_string();
        assert_eq!(
            err,
            "unknown node policy \"tight\"; expected one of: binpack, spread or frag"
        );
        assert!("".parse::<NodePolicy>().is_err());
        assert!("Binpack".parse::<NodePolicy>().is_err());

        for ok in ["frag", "numa,binpack", " spread , mutex ", "topology-aware"] {
            assert!(ok.parse::<GpuPolicy>().is_ok(), "{ok:?}");
        }
        let err = "numa,bogus".parse::<GpuPolicy>().unwrap_err().to_string();
        assert!(err.contains("\"numa,bogus\""), "{err}");
        assert!(err.contains("topology-aware"), "{err}");
        assert!("numa,".parse::<GpuPolicy>().is_err());
    }
}
