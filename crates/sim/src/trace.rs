//! Loading the openb node and pod CSVs and normalising pods
//! (`docs/simulator.md#inputs-and-normalisation`).

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::error::SimError;
use crate::frag::{ClassKey, ModelSet};

/// Interned GPU model names; a model's id is its index (at most 64).
#[derive(Debug, Clone, Default)]
pub struct ModelTable {
    names: Vec<String>,
}

impl ModelTable {
    /// Id of `name`, interning it when new.
    pub fn intern(&mut self, name: &str) -> Option<u8> {
        if let Some(i) = self.names.iter().position(|n| n == name) {
            return u8::try_from(i).ok();
        }
        if self.names.len() >= 64 {
            return None;
        }
        self.names.push(name.to_string());
        u8::try_from(self.names.len() - 1).ok()
    }

    pub fn name(&self, id: u8) -> &str {
        self.names.get(usize::from(id)).map_or("?", String::as_str)
    }
}

/// One GPU node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRecord {
    pub name: String,
    pub cpu_milli: i64,
    pub memory_mib: i64,
    pub gpus: u8,
    pub model: u8,
}

/// One normalised task.
#[derive(Debug, Clone, PartialEq)]
pub struct PodRecord {
    pub name: String,
    pub cpu_milli: i64,
    pub memory_mib: i64,
    /// Number of GPUs (0 for CPU-only).
    pub num_gpu: u32,
    /// Per-GPU share d in milli, clamped to (0, 1000]; 0 for CPU-only.
    pub gpu_milli: i32,
    /// The raw `gpu_spec` (empty = any model).
    pub spec: String,
    pub models: ModelSet,
}

impl PodRecord {
    /// Total GPU request num·d in milli.
    pub fn gpu_request(&self) -> i64 {
        i64::from(self.num_gpu) * i64::from(self.gpu_milli)
    }

    /// The task's typical-workload key (`docs/simulator.md#typical-workload`).
    pub fn class_key(&self) -> ClassKey {
        ClassKey {
            cpu_milli: self.cpu_milli,
            gpu_milli: self.gpu_milli,
            num_gpu: self.num_gpu,
            spec: self.spec.clone(),
            models: self.models,
        }
    }
}

/// Reads a whole text file; a name ending in `.gz` is gunzipped on the way, so
/// the compressed traces under `data/` load as they are.
pub fn read_text(path: &Path) -> Result<String, SimError> {
    let io = |source| SimError::Io {
        path: path.to_path_buf(),
        source,
    };
    if path.extension().is_some_and(|e| e == "gz") {
        let file = std::fs::File::open(path).map_err(io)?;
        let mut text = String::new();
        flate2::read::MultiGzDecoder::new(std::io::BufReader::new(file))
            .read_to_string(&mut text)
            .map_err(io)?;
        Ok(text)
    } else {
        std::fs::read_to_string(path).map_err(io)
    }
}

/// Minimal CSV reader: the openb files have no quoting, so a split on commas
/// with a header lookup is enough and keeps errors precise (file + line).
struct Csv {
    path: PathBuf,
    header: HashMap<String, usize>,
    rows: Vec<(usize, Vec<String>)>,
}

impl Csv {
    fn read(path: &Path) -> Result<Self, SimError> {
        let text = read_text(path)?;
        let mut lines = text.lines().enumerate();
        let header_line = loop {
            match lines.next() {
                Some((_, l)) if l.trim().is_empty() => continue,
                Some((_, l)) => break l,
                None => {
                    return Err(SimError::Empty {
                        path: path.to_path_buf(),
                    });
                }
            }
        };
        let header = header_line
            .trim_start_matches('\u{feff}')
            .split(',')
            .enumerate()
            .map(|(i, h)| (h.trim().to_string(), i))
            .collect();
        let rows = lines
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| (i + 1, l.split(',').map(|f| f.trim().to_string()).collect()))
            .collect();
        Ok(Self {
            path: path.to_path_buf(),
            header,
            rows,
        })
    }

    fn column(&self, name: &str) -> Result<usize, SimError> {
        self.header
            .get(name)
            .copied()
            .ok_or_else(|| SimError::MissingColumn {
                path: self.path.clone(),
                column: name.to_string(),
            })
    }

    fn field<'a>(
        &self,
        line: usize,
        row: &'a [String],
        col: usize,
        name: &str,
    ) -> Result<&'a str, SimError> {
        row.get(col)
            .map(String::as_str)
            .ok_or_else(|| self.bad(line, format!("missing field `{name}`")))
    }

    fn int(&self, line: usize, row: &[String], col: usize, name: &str) -> Result<i64, SimError> {
        let raw = self.field(line, row, col, name)?;
        // Some exports write integers as "1000.0"; accept those, reject others.
        raw.parse::<i64>()
            .ok()
            .or_else(|| {
                raw.parse::<f64>()
                    .ok()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 1e15)
                    .map(|f| f as i64)
            })
            .ok_or_else(|| self.bad(line, format!("field `{name}` is not an integer: {raw:?}")))
    }

    fn bad(&self, line: usize, message: String) -> SimError {
        SimError::Parse {
            path: self.path.clone(),
            line,
            message,
        }
    }
}

/// Loads the node list (`sn, cpu_milli, memory_mib, gpu, model`).
pub fn load_nodes(path: &Path, models: &mut ModelTable) -> Result<Vec<NodeRecord>, SimError> {
    let csv = Csv::read(path)?;
    let (c_name, c_cpu, c_mem, c_gpu, c_model) = (
        csv.column("sn")?,
        csv.column("cpu_milli")?,
        csv.column("memory_mib")?,
        csv.column("gpu")?,
        csv.column("model")?,
    );
    let mut nodes = Vec::with_capacity(csv.rows.len());
    for (line, row) in &csv.rows {
        let line = *line;
        let gpus = csv.int(line, row, c_gpu, "gpu")?;
        let gpus = u8::try_from(gpus)
            .ok()
            .filter(|g| usize::from(*g) <= crate::cluster::MAX_GPUS)
            .ok_or_else(|| {
                csv.bad(
                    line,
                    format!("gpu count {gpus} outside 0..={}", crate::cluster::MAX_GPUS),
                )
            })?;
        let model_name = csv.field(line, row, c_model, "model")?;
        let model_name = if model_name == "nan" { "" } else { model_name };
        let model = models
            .intern(model_name)
            .ok_or_else(|| csv.bad(line, "more than 64 GPU models".to_string()))?;
        let cpu_milli = csv.int(line, row, c_cpu, "cpu_milli")?;
        let memory_mib = csv.int(line, row, c_mem, "memory_mib")?;
        if cpu_milli < 0 || memory_mib < 0 {
            return Err(csv.bad(line, "negative capacity".to_string()));
        }
        nodes.push(NodeRecord {
            name: csv.field(line, row, c_name, "sn")?.to_string(),
            cpu_milli,
            memory_mib,
            gpus,
            model,
        });
    }
    if nodes.is_empty() {
        return Err(SimError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(nodes)
}

/// Normalises one pod row (`docs/simulator.md#inputs-and-normalisation`).
#[allow(clippy::too_many_arguments)]
fn normalise_pod(
    name: &str,
    cpu_milli: i64,
    memory_mib: i64,
    num_gpu: i64,
    gpu_milli: i64,
    spec_raw: &str,
    models: &mut ModelTable,
) -> Result<PodRecord, String> {
    if cpu_milli < 0 || memory_mib < 0 || num_gpu < 0 {
        return Err("negative request".to_string());
    }
    let num = u32::try_from(num_gpu).map_err(|_| format!("num_gpu {num_gpu} too large"))?;
    if num > 64 {
        return Err(format!("num_gpu {num} too large"));
    }
    // d = gpu_milli clamped to (0, 1000]; a non-positive share means no GPU.
    let (num, d) = if num > 0 && gpu_milli > 0 {
        (num, gpu_milli.min(1000) as i32)
    } else {
        (0, 0)
    };
    let spec_raw = if spec_raw == "nan" { "" } else { spec_raw };
    let mut set = 0u64;
    for part in spec_raw.split('|').filter(|p| !p.is_empty()) {
        let id = models
            .intern(part)
            .ok_or_else(|| "more than 64 GPU models".to_string())?;
        set |= 1u64 << id;
    }
    Ok(PodRecord {
        name: name.to_string(),
        cpu_milli,
        memory_mib,
        num_gpu: num,
        gpu_milli: d,
        spec: spec_raw.to_string(),
        models: ModelSet(set),
    })
}

/// Loads a pod list; `gpu_spec` is optional (the multigpu files lack it).
pub fn load_pods(path: &Path, models: &mut ModelTable) -> Result<Vec<PodRecord>, SimError> {
    read_pods(path, "name", models)
}

/// Loads the golden arrival order (`seq,pod,base_pod,cpu_milli,...`): the columns of a
/// pod list, with `pod` as the name.
pub fn load_replay_arrivals(
    path: &Path,
    models: &mut ModelTable,
) -> Result<Vec<PodRecord>, SimError> {
    read_pods(path, "pod", models)
}

fn read_pods(
    path: &Path,
    name_column: &str,
    models: &mut ModelTable,
) -> Result<Vec<PodRecord>, SimError> {
    let csv = Csv::read(path)?;
    let c_name = csv.column(name_column)?;
    let c_cpu = csv.column("cpu_milli")?;
    let c_mem = csv.column("memory_mib")?;
    let c_num = csv.column("num_gpu")?;
    let c_milli = csv.column("gpu_milli")?;
    let c_spec = csv.header.get("gpu_spec").copied();
    let mut pods = Vec::with_capacity(csv.rows.len());
    for (line, row) in &csv.rows {
        let line = *line;
        let spec = c_spec.and_then(|c| row.get(c)).map_or("", String::as_str);
        let pod = normalise_pod(
            csv.field(line, row, c_name, name_column)?,
            csv.int(line, row, c_cpu, "cpu_milli")?,
            csv.int(line, row, c_mem, "memory_mib")?,
            csv.int(line, row, c_num, "num_gpu")?,
            csv.int(line, row, c_milli, "gpu_milli")?,
            spec,
            models,
        )
        .map_err(|m| csv.bad(line, m))?;
        pods.push(pod);
    }
    if pods.is_empty() {
        return Err(SimError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(pods)
}

/// Loads golden node ranks (`node,rank`) and returns the rank of each node in
/// `nodes` order.
pub fn load_replay_ranks(path: &Path, nodes: &[NodeRecord]) -> Result<Vec<u32>, SimError> {
    let csv = Csv::read(path)?;
    let c_node = csv.column("node")?;
    let c_rank = csv.column("rank")?;
    let mut by_name: HashMap<&str, u32> = HashMap::new();
    for (line, row) in &csv.rows {
        let rank = csv.int(*line, row, c_rank, "rank")?;
        let rank = u32::try_from(rank).map_err(|_| csv.bad(*line, format!("bad rank {rank}")))?;
        by_name.insert(csv.field(*line, row, c_node, "node")?, rank);
    }
    nodes
        .iter()
        .map(|n| {
            by_name
                .get(n.name.as_str())
                .copied()
                .ok_or_else(|| SimError::Parse {
                    path: path.to_path_buf(),
                    line: 0,
                    message: format!("no rank for node {}", n.name),
                })
        })
        .collect()
}

/// Loads golden decisions (`seq,pod,node,gpu_index`): (node name, GPU indexes).
/// One golden decision: the node name (None = rejected) and GPU indexes.
pub type GoldenDecision = (Option<String>, Vec<u8>);

pub fn load_decisions(path: &Path) -> Result<Vec<GoldenDecision>, SimError> {
    let csv = Csv::read(path)?;
    let c_node = csv.column("node")?;
    let c_gpu = csv.column("gpu_index")?;
    let mut out = Vec::with_capacity(csv.rows.len());
    for (line, row) in &csv.rows {
        let node = row.get(c_node).filter(|s| !s.is_empty()).cloned();
        let gpus = match row.get(c_gpu).filter(|s| !s.is_empty()) {
            Some(s) => s
                .split('-')
                .map(|g| {
                    g.parse::<u8>()
                        .map_err(|_| csv.bad(*line, format!("bad gpu_index {s:?}")))
                })
                .collect::<Result<Vec<_>, _>>()?,
            None => Vec::new(),
        };
        out.push((node, gpus));
    }
    Ok(out)
}
