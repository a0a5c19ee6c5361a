//! A supply-aware pairing term for GPU-sharing tasks (`docs/simulator.md#supply-aware-pairing`):
//! how much of a partly used GPU's free share ("hole") is likely to stay idle, given how many
//! future tasks small enough to fill it the demand seen so far promises, against how many
//! holes of that size or smaller already compete for them.
//!
//! ```text
//! S(x)    = h · #(sharing tasks seen with share ≤ x)      expected future fillers (h: horizon)
//! H(x)    = #(GPUs with 0 < free ≤ x)                      holes competing for them
//! waste(x) = x · (1 − min(1, S(x) / max(1, H(x))))         0 for a free or a full GPU
//! gain    = (waste(r) − waste(r − d)) / 1000               placing d on a GPU with r free
//! ```
//!
//! F_n(M) prices a hole by the share of M's classes it cannot hold, the same for every hole of
//! that size however many there are; this term sees that a hole size is already over-supplied
//! (the 190-milli holes of the 810-milli tasks on openb) and steers sharing tasks into existing
//! holes instead of opening new ones. Shares are milli-GPU (1000 = one GPU).

/// Shares a histogram covers: 0 ..= 1000 milli.
const SHARES: usize = 1001;

/// One whole GPU in milli.
const WHOLE: i32 = 1000;

/// The sharing tasks seen so far, by share.
#[derive(Debug, Clone)]
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

/// `waste(x)` for every hole size, for one cluster state.
#[derive(Debug, Clone)]
pub struct HoleWaste {
    waste: Vec<f64>,
}

impl HoleSupply {
    /// Counts one sharing task (0 < `milli` < 1000; other shares hold no hole and are ignored).
    pub fn observe(&mut self, milli: i32) {
        if let Some(slot) = sharing_index(milli).and_then(|i| self.seen.get_mut(i)) {
            *slot += 1.0;
        }
    }

    /// `waste(x)` given the free shares of every GPU of the cluster and the horizon `h`
    /// (future sharing tasks per task seen so far).
    pub fn waste(&self, gpu_free: impl IntoIterator<Item = i32>, horizon: f64) -> HoleWaste {
        let mut holes = vec![0.0; SHARES];
        for r in gpu_free {
            if let Some(slot) = sharing_index(r).and_then(|i| holes.get_mut(i)) {
                *slot += 1.0;
            }
        }
        let mut waste = vec![0.0; SHARES];
        let (mut supply, mut competing) = (0.0, 0.0);
        for x in 1..SHARES - 1 {
            supply += self.seen[x] * horizon;
            competing += holes[x];
            let filled = (supply / f64::max(competing, 1.0)).min(1.0);
            waste[x] = x as f64 * (1.0 - filled);
        }
        HoleWaste { waste }
    }
}

impl HoleWaste {
    /// The term's gain, in GPUs, of placing `milli` on a GPU with `free` milli free: the waste of
    /// the hole filled (none for a free GPU) less the waste of the hole left.
    pub fn gain(&self, free: i32, milli: i32) -> f64 {
        let at = |x: i32| {
            usize::try_from(x)
                .ok()
                .and_then(|i| self.waste.get(i))
                .copied()
                .unwrap_or(0.0)
        };
        (at(free) - at(free - milli)) / f64::from(WHOLE)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unfillable_hole_is_all_waste_and_a_free_gpu_none() {
        let supply = HoleSupply::default();
        let w = supply.waste([1000, 190, 0], 4.0);
        // Nothing seen: every hole stays idle; opening one on a free GPU costs its size.
        assert!((w.gain(1000, 810) + 0.19).abs() < 1e-12);
        // Filling a 190 hole exactly removes its waste.
        assert!((w.gain(190, 190) - 0.19).abs() < 1e-12);
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
        let w = supply.waste([150, 150, 1000], 4.0);
        assert_eq!(w.gain(1000, 850), 0.0);
        // Fillers of 100 do not fit a 90 hole: it stays waste.
        assert!((w.gain(1000, 910) + 0.09).abs() < 1e-12);
        // Horizon 0.1: 0.3 fillers for 2 holes, 85 % of a 150 hole stays idle.
        let w = supply.waste([150, 150, 1000], 0.1);
        assert!((w.gain(1000, 850) + 0.15 * 0.85).abs() < 1e-12);
    }

    #[test]
    fn out_of_range_shares_are_ignored() {
        let mut supply = HoleSupply::default();
        supply.observe(-5);
        supply.observe(5000);
        let w = supply.waste([-1, 2000, 500], 1.0);
        assert!((w.gain(500, 100) - (0.5 - 0.4)).abs() < 1e-12);
        assert_eq!(w.gain(3000, 100), 0.0);
    }
}
