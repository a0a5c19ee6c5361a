//! Per-pod device scoring weights (`hami.io/device-scoring-weights`):
//! `slot=<n>,core=<n>,memory=<n>`.
//!
//! An invalid value fails the whole Filter call in HAMi rather than falling back to the
//! defaults, because silently scoring with weights the user did not ask for would place the
//! pod somewhere they did not expect. Each rejection is its own error so the message tells the
//! user exactly which entry to fix.

use super::error::CodecError;
use super::gofmt::parse_int;

/// Relative weight of slot, core and memory utilisation in a device's score.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ScoringWeights {
    pub slot: u32,
    pub core: u32,
    pub memory: u32,
}

impl Default for ScoringWeights {
    /// Equal weights: HAMi's score before the annotation existed.
    fn default() -> Self {
        ScoringWeights {
            slot: 1,
            core: 1,
            memory: 1,
        }
    }
}

/// Decodes `slot=<n>,core=<n>,memory=<n>`: exactly three entries in any order, spaces allowed
/// around keys and values, each value a non-negative integer, no duplicate or unknown key, not
/// all zero. Checks run in HAMi's order, so the first error reported is the one HAMi reports.
/// Values above `u32::MAX` are rejected as too large (HAMi would accept up to `i64::MAX`).
pub fn decode_scoring_weights(value: &str) -> Result<ScoringWeights, CodecError> {
    let entries: Vec<&str> = value.split(',').collect();
    if entries.len() != 3 {
        return Err(CodecError::WeightsEntryCount {
            value: value.to_owned(),
        });
    }
    let mut weights = ScoringWeights {
        slot: 0,
        core: 0,
        memory: 0,
    };
    let mut seen: Vec<&str> = Vec::with_capacity(3);
    for entry in entries {
        let (key, weight) = parse_entry(value, entry, &seen)?;
        let slot = match key {
            "slot" => &mut weights.slot,
            "core" => &mut weights.core,
            "memory" => &mut weights.memory,
            _ => {
                return Err(CodecError::WeightsUnknownKey {
                    value: value.to_owned(),
                    key: key.to_owned(),
                });
            }
        };
        *slot = weight;
        seen.push(key);
    }
    if weights.slot == 0 && weights.core == 0 && weights.memory == 0 {
        return Err(CodecError::WeightsAllZero {
            value: value.to_owned(),
        });
    }
    Ok(weights)
}

/// Splits and checks one `key=value` entry (everything but the key's name).
fn parse_entry<'a>(
    value: &str,
    entry: &'a str,
    seen: &[&str],
) -> Result<(&'a str, u32), CodecError> {
    let Some((key, weight)) = entry.trim().split_once('=') else {
        return Err(CodecError::WeightsNotKeyValue {
            value: value.to_owned(),
            entry: entry.to_owned(),
        });
    };
    let key = key.trim();
    let named = || (value.to_owned(), key.to_owned());
    if seen.contains(&key) {
        let (value, key) = named();
        return Err(CodecError::WeightsDuplicateKey { value, key });
    }
    let Ok(weight) = parse_int(weight.trim(), 64, "ParseInt") else {
        let (value, key) = named();
        return Err(CodecError::WeightsNotInteger { value, key });
    };
    if weight < 0 {
        let (value, key) = named();
        return Err(CodecError::WeightsNegative { value, key });
    }
    let Ok(weight) = u32::try_from(weight) else {
        let (value, key) = named();
        return Err(CodecError::WeightsTooLarge { value, key });
    };
    Ok((key, weight))
}

/// Encodes as `slot=<n>,core=<n>,memory=<n>`. All-zero weights encode but do not decode, as
/// they are not a valid annotation.
pub fn encode_scoring_weights(weights: &ScoringWeights) -> String {
    format!(
        "slot={},core={},memory={}",
        weights.slot, weights.core, weights.memory
    )
}
