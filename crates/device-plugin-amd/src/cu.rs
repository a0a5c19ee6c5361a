//! Compute-unit bookkeeping (`docs/vendors.md#amd-device-plugin`): which CUs of each GPU
//! the node's pods hold, the ID_List grammar of `HSA_CU_MASK` (`0-3,8,10-12`), and the
//! first-fit choice of the lowest free CUs.

use std::collections::{BTreeMap, BTreeSet};

/// Pod annotation recording the CUs a pod holds: JSON `{"<device id>":"<ID_List>"}`.
pub const CU_ALLOCATED: &str = "hami.io/amd-cu-allocated";

/// Why CU state cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CuError {
    #[error("CU list {0:?} is malformed (expected e.g. 0-3,8,10-12)")]
    BadList(String),
    #[error("pod {pod}: {key} is not a JSON object of CU lists: {error}")]
    BadAnnotation {
        pod: String,
        key: &'static str,
        error: String,
    },
    #[error("device {device}: CUs {cus} are held by two pods ({first} and {second})")]
    Overlap {
        device: String,
        cus: String,
        first: String,
        second: String,
    },
    #[error("device {device}: {wanted} CUs wanted, only {free} of {total} free (held: {held})")]
    Exhausted {
        device: String,
        wanted: u32,
        free: u32,
        total: u32,
        held: String,
    },
}

/// Parses an ID_List (`0-3,8`); empty means none.
pub fn parse_list(s: &str) -> Result<BTreeSet<u32>, CuError> {
    let bad = || CuError::BadList(s.to_string());
    let mut out = BTreeSet::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let a: u32 = a.trim().parse().map_err(|_| bad())?;
                let b: u32 = b.trim().parse().map_err(|_| bad())?;
                if a > b {
                    return Err(bad());
                }
                out.extend(a..=b);
            }
            None => {
                out.insert(part.parse().map_err(|_| bad())?);
            }
        }
    }
    Ok(out)
}

/// Formats CUs as an ID_List, runs collapsed (`0-3,8,10-12`).
pub fn format_list(cus: &BTreeSet<u32>) -> String {
    let mut parts = Vec::new();
    let mut it = cus.iter().copied().peekable();
    while let Some(start) = it.next() {
        let mut end = start;
        while it.peek() == Some(&(end + 1)) {
            end += 1;
            it.next();
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    parts.join(",")
}

/// Parses one pod's `hami.io/amd-cu-allocated` value.
pub fn parse_annotation(
    pod: &str,
    value: &str,
) -> Result<BTreeMap<String, BTreeSet<u32>>, CuError> {
    let map: BTreeMap<String, String> =
        serde_json::from_str(value).map_err(|e| CuError::BadAnnotation {
            pod: pod.into(),
            key: CU_ALLOCATED,
            error: e.to_string(),
        })?;
    map.into_iter()
        .map(|(dev, list)| parse_list(&list).map(|cus| (dev, cus)))
        .collect()
}

/// Encodes a pod's CU holdings as the annotation's JSON.
pub fn encode_annotation(held: &BTreeMap<String, BTreeSet<u32>>) -> String {
    let map: BTreeMap<&str, String> = held
        .iter()
        .filter(|(_, cus)| !cus.is_empty())
        .map(|(dev, cus)| (dev.as_str(), format_list(cus)))
        .collect();
    serde_json::to_string(&map).unwrap_or_else(|_| "{}".into())
}

/// The CUs the node's pods hold, per device, with the pod holding each one.
#[derive(Debug, Clone, Default)]
pub struct Occupancy {
    owners: BTreeMap<String, BTreeMap<u32, String>>,
}

impl Occupancy {
    /// Adds one pod's holdings; a CU held twice is an error (fail closed: the node's
    /// records cannot be trusted).
    pub fn add(
        &mut self,
        pod: &str,
        held: &BTreeMap<String, BTreeSet<u32>>,
    ) -> Result<(), CuError> {
        for (dev, cus) in held {
            let owners = self.owners.entry(dev.clone()).or_default();
            let clash: BTreeSet<u32> = cus
                .iter()
                .copied()
                .filter(|c| owners.contains_key(c))
                .collect();
            if let Some(first) = clash.first().and_then(|c| owners.get(c)) {
                return Err(CuError::Overlap {
                    device: dev.clone(),
                    cus: format_list(&clash),
                    first: first.clone(),
                    second: pod.into(),
                });
            }
            owners.extend(cus.iter().map(|c| (*c, pod.to_string())));
        }
        Ok(())
    }

    /// Takes the `wanted` lowest free CUs of `device` (which has `total`) for `pod`.
    pub fn take(
        &mut self,
        pod: &str,
        device: &str,
        total: u32,
        wanted: u32,
    ) -> Result<BTreeSet<u32>, CuError> {
        let owners = self.owners.entry(device.to_string()).or_default();
        let free: Vec<u32> = (0..total).filter(|c| !owners.contains_key(c)).collect();
        if (free.len() as u64) < u64::from(wanted) {
            let held: BTreeSet<u32> = owners.keys().copied().collect();
            return Err(CuError::Exhausted {
                device: device.into(),
                wanted,
                free: free.len() as u32,
                total,
                held: format_list(&held),
            });
        }
        let picked: BTreeSet<u32> = free.into_iter().take(wanted as usize).collect();
        owners.extend(picked.iter().map(|c| (*c, pod.to_string())));
        Ok(picked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(v: &[u32]) -> BTreeSet<u32> {
        v.iter().copied().collect()
    }

    #[test]
    fn id_list_round_trips() {
        assert_eq!(
            format_list(&set(&[0, 1, 2, 3, 8, 10, 11, 12])),
            "0-3,8,10-12"
        );
        assert_eq!(
            parse_list("0-3,8,10-12").unwrap(),
            set(&[0, 1, 2, 3, 8, 10, 11, 12])
        );
        assert_eq!(parse_list("").unwrap(), set(&[]));
        assert_eq!(format_list(&set(&[])), "");
        for bad in ["a", "3-1", "1-", "-2", "1,,x"] {
            assert!(parse_list(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn first_fit_takes_the_lowest_free_cus_and_refuses_overlap() {
        let mut occ = Occupancy::default();
        let held = parse_annotation("ns/a", r#"{"gpu0":"0-3,8"}"#).unwrap();
        occ.add("ns/a", &held).unwrap();
        let got = occ.take("ns/b", "gpu0", 16, 6).unwrap();
        assert_eq!(format_list(&got), "4-7,9-10");
        let err = occ.take("ns/c", "gpu0", 16, 6).unwrap_err();
        assert_eq!(
            err.to_string(),
            "device gpu0: 6 CUs wanted, only 5 of 16 free (held: 0-10)"
        );
        let clash = parse_annotation("ns/d", r#"{"gpu0":"2"}"#).unwrap();
        assert_eq!(
            occ.add("ns/d", &clash).unwrap_err(),
            CuError::Overlap {
                device: "gpu0".into(),
                cus: "2".into(),
                first: "ns/a".into(),
                second: "ns/d".into()
            }
        );
        assert!(parse_annotation("ns/e", "not json").is_err());
        assert_eq!(
            encode_annotation(&BTreeMap::from([("gpu0".to_string(), got)])),
            r#"{"gpu0":"4-7,9-10"}"#
        );
    }
}
