//! Binning of per-event records into the paper's curves (`docs/simulator.md#events-and-curves`).

use std::collections::BTreeMap;

use crate::policy::Placement;
use crate::runner::Event;
use crate::trace::PodRecord;

/// Largest arrived-% bin (the stream stops at 130% of capacity).
pub const MAX_X: usize = 130;

/// Per-run curves indexed by arrived % (0..=130). NaN where no event binned.
#[derive(Debug, Clone, PartialEq)]
pub struct Curve {
    pub alloc: Vec<f64>,
    pub unalloc: Vec<f64>,
    pub frag_amount: Vec<f64>,
    pub frag_rate: Vec<f64>,
}

impl Curve {
    pub fn unalloc_at(&self, x: usize) -> f64 {
        self.unalloc.get(x).copied().unwrap_or(f64::NAN)
    }

    /// Fragmentation rate (100·F / idle GPU) at arrived = `x` %.
    pub fn frag_rate_at(&self, x: usize) -> f64 {
        self.frag_rate.get(x).copied().unwrap_or(f64::NAN)
    }
}

/// Python's `round(x, 2)`: correctly rounded on the exact binary value, ties
/// to even. Rust's `{:.2}` formatting rounds the exact value the same way.
pub fn round2(x: f64) -> f64 {
    format!("{x:.2}").parse().unwrap_or(x)
}

/// Builds the curves. `total_gpus` is the GPU count (6212), `capacity` = 1000×.
pub fn bin_events(events: &[Event], total_gpus: i64, capacity: i64) -> Curve {
    let g = total_gpus as f64;
    // Same float expression as the paper's merge scripts.
    let arrive: Vec<i64> = events
        .iter()
        .map(|e| (e.arrived as f64 / g / 10.0).round_ties_even() as i64)
        .collect();
    let alloc_e: Vec<f64> = events
        .iter()
        .map(|e| round2(e.used as f64 / g / 10.0))
        .collect();
    let mut curve = Curve {
        alloc: vec![f64::NAN; MAX_X + 1],
        unalloc: vec![f64::NAN; MAX_X + 1],
        frag_amount: vec![f64::NAN; MAX_X + 1],
        frag_rate: vec![f64::NAN; MAX_X + 1],
    };
    // Events per exact bin; arrive is non-decreasing, so a bucket scan is enough.
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); MAX_X + 2];
    for (i, &a) in arrive.iter().enumerate() {
        if (0..=MAX_X as i64 + 1).contains(&a) {
            members[a as usize].push(i);
        }
    }
    for x in 0..=MAX_X {
        let mut idx: Vec<usize> = members[x].clone();
        if idx.is_empty() {
            let lo = x.saturating_sub(1);
            for m in members.iter().take(x + 2).skip(lo) {
                idx.extend(m);
            }
        }
        if idx.is_empty() {
            // Coarse traces (few, large tasks) can skip several points; the
            // cluster state at x is then that of the last event before it.
            // The openb runs never reach this branch.
            match arrive.iter().rposition(|&a| a <= x as i64) {
                Some(i) => idx.push(i),
                None => continue,
            }
        }
        let n = idx.len() as f64;
        let alloc = round2(idx.iter().map(|&i| alloc_e[i]).sum::<f64>() / n);
        curve.alloc[x] = alloc;
        curve.unalloc[x] = round2(100.0 - alloc);
        curve.frag_amount[x] = round2(
            100.0 * (idx.iter().map(|&i| events[i].frag).sum::<f64>() / n) / capacity as f64,
        );
        curve.frag_rate[x] = idx
            .iter()
            .map(|&i| {
                if events[i].idle > 0 {
                    100.0 * events[i].frag / events[i].idle as f64
                } else {
                    0.0
                }
            })
            .sum::<f64>()
            / n;
    }
    curve
}

/// The failed tasks of one shape `(cpu, num, d, spec)`, the paper's failed-task histogram
/// (`docs/simulator.md#events-and-curves`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FailedShape {
    pub cpu_milli: i64,
    pub num_gpu: u32,
    pub gpu_milli: i32,
    /// The raw `gpu_spec` (empty = any model).
    pub spec: String,
    /// Failures up to arrived = 100% (the events binned at x ≤ 100).
    pub count_at_100: usize,
    /// Failures over the whole run.
    pub count: usize,
}

impl FailedShape {
    /// GPU milli of the failures up to x = 100.
    pub fn gpu_milli_at_100(&self) -> i64 {
        self.count_at_100 as i64 * i64::from(self.num_gpu) * i64::from(self.gpu_milli)
    }
}

/// The failed-task histogram of a run: `pods[i]` was attempted with outcome
/// `decisions[i]` and left `events[i]`. Sorted by failed GPU milli up to x = 100, then by
/// count, largest first.
pub fn failed_tasks(
    pods: &[PodRecord],
    decisions: &[Option<Placement>],
    events: &[Event],
    total_gpus: i64,
) -> Vec<FailedShape> {
    let g = total_gpus as f64;
    let mut by_shape: BTreeMap<(i64, u32, i32, &str), (usize, usize)> = BTreeMap::new();
    for ((pod, decision), event) in pods.iter().zip(decisions).zip(events) {
        if decision.is_some() {
            continue;
        }
        let x = (event.arrived as f64 / g / 10.0).round_ties_even();
        let counts = by_shape
            .entry((pod.cpu_milli, pod.num_gpu, pod.gpu_milli, pod.spec.as_str()))
            .or_default();
        counts.1 += 1;
        if x <= 100.0 {
            counts.0 += 1;
        }
    }
    let mut out: Vec<FailedShape> = by_shape
        .into_iter()
        .map(
            |((cpu_milli, num_gpu, gpu_milli, spec), (at_100, all))| FailedShape {
                cpu_milli,
                num_gpu,
                gpu_milli,
                spec: spec.to_string(),
                count_at_100: at_100,
                count: all,
            },
        )
        .collect();
    out.sort_by(|a, b| {
        b.gpu_milli_at_100()
            .cmp(&a.gpu_milli_at_100())
            .then(b.count.cmp(&a.count))
    });
    out
}

/// Mean and sample standard deviation (ddof = 1, like pandas).
pub fn mean_sd(xs: &[f64]) -> (f64, f64) {
    if xs.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    if xs.len() < 2 {
        return (mean, 0.0);
    }
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt())
}

/// Median (NaNs ignored).
pub fn median(xs: &[f64]) -> f64 {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(arrived: i64, used: i64) -> Event {
        Event {
            arrived,
            used,
            frag: 0.0,
            idle: 1000 - used,
        }
    }

    #[test]
    fn round2_matches_python() {
        assert_eq!(round2(95.285), 95.28); // 95.285 is 95.28499999… in binary
        assert_eq!(round2(0.125), 0.12); // exact tie → even
        assert_eq!(round2(1.0 / 3.0), 0.33);
    }

    #[test]
    fn bins_exact_and_neighbour_fallback() {
        // total_gpus = 1, so arrive% = arrived/10 and alloc% = used/10.
        let events = vec![ev(0, 0), ev(10, 10), ev(14, 12), ev(30, 20)];
        let c = bin_events(&events, 1, 1000);
        assert_eq!(c.alloc[0], 0.0);
        // x = 1 holds arrived 10 and 14 (1.0 and 1.4 → 1): mean(1.0, 1.2) = 1.1.
        assert_eq!(c.alloc[1], 1.1);
        assert_eq!(c.unalloc[1], 98.9);
        // x = 2 is empty: fall back to x ∈ [1, 3] → mean(1.0, 1.2, 2.0).
        assert_eq!(c.alloc[2], round2((1.0 + 1.2 + 2.0) / 3.0));
        assert_eq!(c.alloc[3], 2.0);
        // Beyond ±1 of any event: the last earlier event.
        assert_eq!(c.alloc[5], 2.0);
    }

    #[test]
    fn half_even_binning() {
        // 25/10 = 2.5 → 2 (ties to even), 35/10 = 3.5 → 4.
        let events = vec![ev(25, 1), ev(35, 2)];
        let c = bin_events(&events, 1, 1000);
        assert_eq!(c.alloc[2], 0.1);
        assert_eq!(c.alloc[4], 0.2);
    }

    #[test]
    fn stats() {
        let (m, sd) = mean_sd(&[1.0, 2.0, 3.0]);
        assert_eq!(m, 2.0);
        assert!((sd - 1.0).abs() < 1e-12);
        assert_eq!(median(&[3.0, 1.0, 2.0, 4.0]), 2.5);
    }
}
