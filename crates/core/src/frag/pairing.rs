//! A supply-aware pairing term for GPU-sharing tasks (`docs/simulator.md#supply-aware-pairing`):
//! how much of a partly used GPU's free share ("hole") is likely to stay idle, given how many
//! future tasks small enough to fill it the demand seen so far promises, against how many
//! holes of that size or smaller already compete for them.
//!
//! ```text
//! S(x)    = h · #(sharing tasks seen with share ≤ x)      expected future fillers (h: horizon)
//! H(x)    = #(GPUs with 0 < free ≤ x)                      holes competing for them
//! waste(x) = x · (1 − min(1, S(x) / max(1, H(x))))         0 for a free or a full GPU
//! gain    = (waste(r) − waste(r′)) / 1000                  a GPU going from r to r′ free
//! ```
//!
//! F_n(M) prices a hole by the share of M's classes it cannot hold, the same for every hole of
//! that size however many there are; this term sees that a hole size is already over-supplied
//! (the 190-milli holes of the 810-milli tasks on openb) and steers sharing tasks into existing
//! holes instead of opening new ones. Shares are milli-GPU (1000 = one GPU).
//!
//! The term reads the whole cluster (H), so it cannot live in a node's cached score: callers
//! add it for the node's chosen GPU after the cache, by default as `weight · 1000 · gain`
//! milli-GPU added to the cached change Δ before FGD's quantisation ([`Blend`]). The
//! cluster's free shares are a [`FreeShares`] histogram the ledger keeps as devices change
//! (`crate::ledger::Ledger::free_shares`); the demand is a [`HoleSupply`].

use std::sync::Arc;

/// Shares a histogram covers: 0 ..= 1000 milli.
const SHARES: usize = 1001;

/// One whole GPU in milli.
const WHOLE: i32 = 1000;

/// The sharing tasks seen so far, by share (weighted: a decayed count is fine).
#[derive(Debug, Clone, PartialEq)]
pub struct HoleSupply {
    seen: Vec<f64>,
}

impl Default for HoleSupply {
    fn default() -> Self {
        Self {
            seen: vec![0.0; SHARES],
        }
    }
}

/// How many devices have each free share (0 ..= 1000 milli): the cluster's holes, kept
/// up to date one device change at a time (bounded memory: one counter per share).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FreeShares {
    count: Vec<u32>,
}

impl Default for FreeShares {
    fn default() -> Self {
        Self {
            count: vec![0; SHARES],
        }
    }
}

impl FreeShares {
    /// The histogram of `shares` (values outside 0 ..= 1000 are clamped into it).
    pub fn of(shares: impl IntoIterator<Item = i32>) -> Self {
        let mut h = FreeShares::default();
        for s in shares {
            h.add(s);
        }
        h
    }

    /// Counts a device with `share` free.
    pub fn add(&mut self, share: i32) {
        let slot = &mut self.count[clamped_index(share)];
        *slot = slot.saturating_add(1);
    }

    /// Forgets a device with `share` free (counted by [`FreeShares::add`] before).
    pub fn remove(&mut self, share: i32) {
        let slot = &mut self.count[clamped_index(share)];
        *slot = slot.saturating_sub(1);
    }

    /// A device's free share went from `before` to `after`.
    pub fn moved(&mut self, before: i32, after: i32) {
        if before != after {
            self.remove(before);
            self.add(after);
        }
    }

    /// Devices with `share` free.
    pub fn count(&self, share: i32) -> u32 {
        self.count[clamped_index(share)]
    }

    /// Devices counted.
    pub fn total(&self) -> u64 {
        self.count.iter().map(|&c| u64::from(c)).sum()
    }
}

/// How expected fillers are matched to holes when `waste(x)` is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Matching {
    /// Every hole of size ≤ x shares the fillers of size ≤ x equally (the formula above).
    #[default]
    Pooled,
    /// Holes in ascending size take the fillers that fit them (size ≤ the hole) before
    /// larger holes do: `waste(x) = x · (1 − min(1, A(x) / max(1, #holes of size x)))`,
    /// A(x) the fillers ≤ x not taken by smaller holes.
    Greedy,
}

/// Where the term enters a node's rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Blend {
    /// Added to the fragmentation change before the primary term ranks it:
    /// `primary(Δ + weight · 1000 · gain)`, the expected idle share priced like fragment
    /// (milli-GPU per milli-GPU; FGD's quantisation then applies to both together).
    #[default]
    Delta,
    /// Added to the rank after the primary term: `primary(Δ) + weight · gain` (score points
    /// per GPU of waste).
    Rank,
}

/// `waste(x)` for every hole size, for one cluster state.
#[derive(Debug, Clone)]
pub struct HoleWaste {
    waste: Vec<f64>,
}

impl HoleSupply {
    /// Counts one sharing task (0 < `milli` < 1000; other shares hold no hole and are ignored).
    pub fn observe(&mut self, milli: i32) {
        self.observe_weighted(milli, 1.0);
    }

    /// Counts `weight` sharing tasks of share `milli` (a decayed count).
    pub fn observe_weighted(&mut self, milli: i32, weight: f64) {
        if let Some(slot) = sharing_index(milli).and_then(|i| self.seen.get_mut(i)) {
            *slot += weight;
        }
    }

    /// `waste(x)` given the cluster's free shares and the horizon `h` (future sharing tasks
    /// per task seen so far).
    pub fn waste(&self, holes: &FreeShares, horizon: f64) -> HoleWaste {
        self.waste_matched(holes, horizon, Matching::Pooled)
    }

    /// [`HoleSupply::waste`] with the fillers matched to holes by `matching`.
    pub fn waste_matched(&self, holes: &FreeShares, horizon: f64, matching: Matching) -> HoleWaste {
        let mut waste = vec![0.0; SHARES];
        let (mut supply, mut competing) = (0.0, 0.0);
        let sizes = self.seen.iter().zip(&holes.count).zip(waste.iter_mut());
        // Hole sizes 1 ..= 999: a free (1000) or full (0) GPU wastes nothing.
        for (x, ((seen, count), waste)) in sizes.enumerate().take(SHARES - 1).skip(1) {
            supply += seen * horizon;
            let here = f64::from(*count);
            let filled = match matching {
                Matching::Pooled => {
                    competing += here;
                    (supply / f64::max(competing, 1.0)).min(1.0)
                }
                Matching::Greedy => {
                    let filled = (supply / f64::max(here, 1.0)).min(1.0);
                    supply = (supply - here).max(0.0);
                    filled
                }
            };
            *waste = x as f64 * (1.0 - filled);
        }
        HoleWaste { waste }
    }
}

impl HoleWaste {
    /// The term's gain, in GPUs, of a GPU going from `before` to `after` milli free: the
    /// waste of the hole filled (none for a free GPU) less the waste of the hole left.
    pub fn gain(&self, before: i32, after: i32) -> f64 {
        let at = |x: i32| {
            usize::try_from(x)
                .ok()
                .and_then(|i| self.waste.get(i))
                .copied()
                .unwrap_or(0.0)
        };
        (at(before) - at(after)) / f64::from(WHOLE)
    }
}

/// The pairing term as a placement applies it: its weight (score points per GPU of waste),
/// horizon and the demand seen. Its `Debug` form leaves the demand out: a plan's debug form
/// keys the nodes' score caches, and the term is applied after them.
#[derive(Clone)]
pub struct Pairing {
    pub weight: f64,
    pub horizon: f64,
    pub matching: Matching,
    pub blend: Blend,
    pub supply: Arc<HoleSupply>,
}

impl std::fmt::Debug for Pairing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pairing")
            .field("weight", &self.weight)
            .field("horizon", &self.horizon)
            .field("matching", &self.matching)
            .field("blend", &self.blend)
            .finish_non_exhaustive()
    }
}

impl Pairing {
    /// The rank bonus of each GPU change for the cluster whose free shares are `holes`.
    pub fn bonus(&self, holes: &FreeShares) -> PairingBonus {
        PairingBonus {
            weight: self.weight,
            blend: self.blend,
            waste: self
                .supply
                .waste_matched(holes, self.horizon, self.matching),
        }
    }
}

/// [`Pairing`] for one cluster state: what a node's rank gains from its chosen GPU.
#[derive(Debug, Clone)]
pub struct PairingBonus {
    weight: f64,
    blend: Blend,
    waste: HoleWaste,
}

impl PairingBonus {
    /// `weight · gain` of a GPU going from `before` to `after` milli free.
    pub fn of(&self, before: i32, after: i32) -> f64 {
        self.weight * self.waste.gain(before, after)
    }

    /// The rank of a node whose score is `rank`, `primary(delta)` plus any other term, when
    /// its chosen GPU goes from `before` to `after` milli free; `primary` is the score's
    /// primary term of a change in milli-GPU ([`Blend`]).
    pub fn rank(
        &self,
        rank: f64,
        delta: f64,
        (before, after): (i32, i32),
        primary: impl Fn(f64) -> f64,
    ) -> f64 {
        match self.blend {
            Blend::Rank => rank + self.of(before, after),
            Blend::Delta => {
                rank - primary(delta) + primary(delta + f64::from(WHOLE) * self.of(before, after))
            }
        }
    }
}

/// Histogram index of a share that makes (or is) a hole: 0 < `milli` < 1000.
fn sharing_index(milli: i32) -> Option<usize> {
    if milli > 0 && milli < WHOLE {
        usize::try_from(milli).ok()
    } else {
        None
    }
}

/// Histogram index of any free share, clamped into 0 ..= 1000.
fn clamped_index(share: i32) -> usize {
    usize::try_from(share.clamp(0, WHOLE)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unfillable_hole_is_all_waste_and_a_free_gpu_none() {
        let supply = HoleSupply::default();
        let w = supply.waste(&FreeShares::of([1000, 190, 0]), 4.0);
        // Nothing seen: every hole stays idle; opening one on a free GPU costs its size.
        assert!((w.gain(1000, 190) + 0.19).abs() < 1e-12);
        // Filling a 190 hole exactly removes its waste.
        assert!((w.gain(190, 0) - 0.19).abs() < 1e-12);
    }

    #[test]
    fn supply_beyond_the_competing_holes_makes_a_hole_free() {
        let mut supply = HoleSupply::default();
        for _ in 0..3 {
            supply.observe(100);
        }
        supply.observe(1000); // a whole GPU: no hole, not counted
        supply.observe(0);
        // Two holes of 150 and 3 × 4 expected fillers of 100: both will be used.
        let w = supply.waste(&FreeShares::of([150, 150, 1000]), 4.0);
        assert_eq!(w.gain(1000, 150), 0.0);
        // Fillers of 100 do not fit a 90 hole: it stays waste.
        assert!((w.gain(1000, 90) + 0.09).abs() < 1e-12);
        // Horizon 0.1: 0.3 fillers for 2 holes, 85 % of a 150 hole stays idle.
        let w = supply.waste(&FreeShares::of([150, 150, 1000]), 0.1);
        assert!((w.gain(1000, 150) + 0.15 * 0.85).abs() < 1e-12);
    }

    #[test]
    fn out_of_range_shares_are_ignored() {
        let mut supply = HoleSupply::default();
        supply.observe(-5);
        supply.observe(5000);
        let w = supply.waste(&FreeShares::of([-1, 2000, 500]), 1.0);
        assert!((w.gain(500, 400) - (0.5 - 0.4)).abs() < 1e-12);
        assert_eq!(w.gain(3000, 2900), 0.0);
    }

    #[test]
    fn the_histogram_follows_moves_and_clamps() {
        let mut h = FreeShares::of([1000, 1000, 190]);
        h.moved(1000, 190);
        h.moved(190, 190);
        assert_eq!((h.count(1000), h.count(190), h.total()), (1, 2, 3));
        h.remove(190);
        h.add(5000);
        assert_eq!((h.count(1000), h.count(190), h.total()), (2, 1, 3));
        h.remove(-3);
        assert_eq!(h.count(0), 0, "removing from an empty bucket stays at 0");
    }

    #[test]
    fn the_bonus_is_the_weighted_gain_and_debug_leaves_the_demand_out() {
        let mut supply = HoleSupply::default();
        supply.observe_weighted(190, 0.5);
        let pairing = Pairing {
            weight: 10.0,
            horizon: 4.0,
            matching: Matching::Pooled,
            blend: Blend::Rank,
            supply: Arc::new(supply),
        };
        // 2 fillers of 190 for 4 holes of 190: half of each stays idle.
        let b = pairing.bonus(&FreeShares::of([190, 190, 190, 190]));
        assert!((b.of(1000, 190) + 10.0 * 0.095).abs() < 1e-12);
        assert!((b.of(190, 0) - 10.0 * 0.095).abs() < 1e-12);
        assert_eq!(
            format!("{pairing:?}"),
            "Pairing { weight: 10.0, horizon: 4.0, matching: Pooled, blend: Rank, .. }"
        );
        // Rank: the weighted gain on top of the rank; Delta: the gain in milli added to
        // the change before the primary term (here ⌊Δ / 100⌋).
        let bucket = |d: f64| (d / 100.0).floor();
        assert!((b.rank(3.0, 250.0, (190, 0), bucket) - (3.0 + 0.95)).abs() < 1e-12);
        let delta = Pairing {
            blend: Blend::Delta,
            ..pairing
        }
        .bonus(&FreeShares::of([190, 190, 190, 190]));
        // 250 + 1000 · 0.95 = 1200 → 12 (the rank had 2 from Δ and 1 from another term).
        assert_eq!(delta.rank(3.0, 250.0, (190, 0), bucket), 13.0);
        // Opening a 190 hole: 250 − 950 = −700 → −7.
        assert_eq!(delta.rank(3.0, 250.0, (1000, 190), bucket), -6.0);
    }

    #[test]
    fn greedy_matching_gives_small_fillers_to_small_holes_first() {
        let mut supply = HoleSupply::default();
        supply.observe(150);
        supply.observe(400);
        // Holes: two of 190, one of 500. Pooled: 2 fillers for 3 holes ≤ 500, a third of
        // each stays idle. Greedy: the 150 filler goes to a 190 hole (half of the two
        // stays), the 400 filler to the 500 hole (all used).
        let holes = FreeShares::of([190, 190, 500]);
        let pooled = supply.waste(&holes, 1.0);
        assert!((pooled.gain(500, 0) - 0.5 / 3.0).abs() < 1e-12);
        let greedy = supply.waste_matched(&holes, 1.0, Matching::Greedy);
        assert!((greedy.gain(190, 0) - 0.095).abs() < 1e-12);
        assert_eq!(greedy.gain(500, 0), 0.0);
        // A 300 hole (none yet): the 150 filler is taken by the 190s, so it would stay idle.
        assert!((greedy.gain(300, 0) - 0.3).abs() < 1e-12);
    }
}
