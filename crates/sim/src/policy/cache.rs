//! Per-(node, task type) score cache. A node's score for a task type depends
//! only on that node's state, which changes for one node per arrival, so most
//! scores are reused across thousands of arrivals.

#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    version: u32,
    score: f64,
    gpu: i8,
    /// The raw change Δ behind `score` (milli-GPU), for policies that rank by more than it.
    delta: f64,
}

#[derive(Debug, Clone, Default)]
pub struct ScoreCache {
    n_types: usize,
    entries: Vec<Entry>,
}

impl ScoreCache {
    pub fn new(n_nodes: usize, n_types: usize) -> Self {
        Self {
            n_types,
            entries: vec![Entry::default(); n_nodes * n_types],
        }
    }

    /// Cached (score, GPU) when computed at node `version` (versions start at 1).
    pub fn get(
        &self,
        node: usize,
        type_id: u32,
        version: u32,
    ) -> Option<(Option<f64>, Option<usize>)> {
        let e = self.entries.get(node * self.n_types + type_id as usize)?;
        if e.version != version {
            return None;
        }
        let score = if e.score.is_nan() {
            None
        } else {
            Some(e.score)
        };
        Some((score, usize::try_from(e.gpu).ok()))
    }

    pub fn put(
        &mut self,
        node: usize,
        type_id: u32,
        version: u32,
        score: Option<f64>,
        gpu: Option<usize>,
        delta: f64,
    ) {
        if let Some(e) = self.entries.get_mut(node * self.n_types + type_id as usize) {
            *e = Entry {
                version,
                score: score.unwrap_or(f64::NAN),
                gpu: gpu.and_then(|g| i8::try_from(g).ok()).unwrap_or(-1),
                delta,
            };
        }
    }

    /// The Δ stored with the entry of (`node`, `type_id`) (0 when none).
    pub fn delta(&self, node: usize, type_id: u32) -> f64 {
        self.entries
            .get(node * self.n_types + type_id as usize)
            .map_or(0.0, |e| e.delta)
    }
}
