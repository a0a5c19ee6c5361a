//! Why a node or device did not fit, with HAMi's reason names and string format.

use std::fmt;

/// HAMi's fit failure reasons. The names are on the wire (FailedNodes, events).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    CardNotHealth,
    CardCordoned,
    CardTypeMismatch,
    NumaNotFit,
    CardUuidMismatch,
    CardTimeSlicingExhausted,
    ExclusiveDeviceAllocateConflict,
    ResourceQuotaNotFit,
    CardInsufficientMemory,
    CardInsufficientCore,
    CardComputeUnitsExhausted,
    CardMigTopologyInfeasible,
    AllocatedCardsInsufficientRequest,
    /// The pod's mode cannot run on the node (Ascend soft split on a node without
    /// hami-vnpu-core, an Enflame profile nothing offers).
    ModeNotFit,
    /// A vendor rule about the device itself refused it (Metax's QoS and app class,
    /// Kunlun's topology groups).
    CardNotFoundCustomFilterRule,
}

impl Reason {
    pub const ALL: [Reason; 15] = [
        Reason::CardNotHealth,
        Reason::CardCordoned,
        Reason::CardTypeMismatch,
        Reason::NumaNotFit,
        Reason::CardUuidMismatch,
        Reason::CardTimeSlicingExhausted,
        Reason::ExclusiveDeviceAllocateConflict,
        Reason::ResourceQuotaNotFit,
        Reason::CardInsufficientMemory,
        Reason::CardInsufficientCore,
        Reason::CardComputeUnitsExhausted,
        Reason::CardMigTopologyInfeasible,
        Reason::AllocatedCardsInsufficientRequest,
        Reason::ModeNotFit,
        Reason::CardNotFoundCustomFilterRule,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::CardNotHealth => "CardNotHealth",
            Reason::CardCordoned => "CardCordoned",
            Reason::CardTypeMismatch => "CardTypeMismatch",
            Reason::NumaNotFit => "NumaNotFit",
            Reason::CardUuidMismatch => "CardUuidMismatch",
            Reason::CardTimeSlicingExhausted => "CardTimeSlicingExhausted",
            Reason::ExclusiveDeviceAllocateConflict => "ExclusiveDeviceAllocateConflict",
            Reason::ResourceQuotaNotFit => "ResourceQuotaNotFit",
            Reason::CardInsufficientMemory => "CardInsufficientMemory",
            Reason::CardInsufficientCore => "CardInsufficientCore",
            Reason::CardComputeUnitsExhausted => "CardComputeUnitsExhausted",
            Reason::CardMigTopologyInfeasible => "CardMigTopologyInfeasible",
            Reason::AllocatedCardsInsufficientRequest => "AllocatedCardsInsufficientRequest",
            Reason::ModeNotFit => "ModeNotFit",
            Reason::CardNotFoundCustomFilterRule => "CardNotFoundCustomFilterRule",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Node-level reasons that are reported bare (no counts).
pub const NODE_INSUFFICIENT_DEVICE: &str = "NodeInsufficientDevice";
pub const NODE_UNREGISTERED: &str = "node unregistered";

/// Per-reason counts for one container's walk over a node's devices. A fixed array:
/// the fit is a hot path and must not allocate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReasonCounts {
    counts: [u32; Reason::ALL.len()],
}

impl ReasonCounts {
    pub fn add(&mut self, r: Reason, n: u32) {
        self.counts[r as usize] += n;
    }

    pub fn get(&self, r: Reason) -> u32 {
        self.counts[r as usize]
    }

    pub fn is_empty(&self) -> bool {
        self.counts.iter().all(|c| *c == 0)
    }

    /// HAMi's reason string: `"<count>/<devices> <Reason>"` entries sorted
    /// lexicographically and joined by `", "`.
    pub fn render(&self, devices: usize) -> String {
        let mut parts: Vec<String> = Reason::ALL
            .iter()
            .filter(|r| self.get(**r) > 0)
            .map(|r| format!("{}/{} {}", self.get(*r), devices, r))
            .collect();
        parts.sort();
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_sorts_entries_as_strings() {
        let mut c = ReasonCounts::default();
        c.add(Reason::CardInsufficientMemory, 2);
        c.add(Reason::CardNotHealth, 1);
        c.add(Reason::AllocatedCardsInsufficientRequest, 1);
        assert_eq!(
            c.render(3),
            "1/3 AllocatedCardsInsufficientRequest, 1/3 CardNotHealth, 2/3 CardInsufficientMemory"
        );
        assert_eq!(ReasonCounts::default().render(4), "");
    }

    #[test]
    fn indices_line_up_with_all() {
        for (i, r) in Reason::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i);
        }
    }
}
