//! The scheduler's `/metrics` page kept in pieces, so a scrape formats only what changed.
//!
//! Nodes and pods are cut into pieces of consecutive entries in page order (about 16
//! nodes or 256 pods each; a piece starts at a key chosen by its hash, so adding or
//! removing an entry changes only its own piece). Each piece keeps its text per family,
//! plain or as one gzip member per family (`hami_server::metrics_page`), and the numbers
//! of the copies it was formatted from ([`NodeCopy::version`]): a scrape formats again
//! only the pieces whose numbers changed, and hands the rest over as they are
//! (`docs/extender.md#metrics`).

use std::fmt;
use std::hash::Hash;
use std::io;
use std::sync::Arc;

use bytes::Bytes;
use hami_server::metrics_page::PageEncoding;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Registry;
use rustc_hash::FxHashMap;

use crate::metrics::{NODE_TOTAL_FAMILIES, QuotaRow, Sections, encode_sections};
use crate::scrape_view::{NodeCopy, PodCopy, PodKey, ScrapeView};

/// Nodes per piece, on average (a node is 8 rows in each of 7 families, plus 4 totals).
pub(crate) const NODES_PER_PIECE: u64 = 16;
/// Pods per piece, on average (a pod is a row per device in each of 2 families).
pub(crate) const PODS_PER_PIECE: u64 = 256;
/// Scrapes after which the pieces of an encoding no scrape asked for are dropped (a plain
/// page of 5,000 nodes is 76 MB; Prometheus asks for gzip).
const KEEP_UNASKED: u64 = 4;

/// The part of the page formatted anew on every scrape: the quota families and the
/// reservations gauge (a few rows).
#[derive(Debug, Default)]
pub(crate) struct Tail {
    pub quotas: Vec<QuotaRow>,
    pub held: u64,
}

/// A run of consecutive nodes or pods, formatted.
#[derive(Debug)]
struct Piece {
    /// The versions of the copies it was formatted from, in order.
    versions: Vec<u64>,
    /// Per encoding (plain, gzip): the text of each family, headers left out.
    encoded: [Option<Box<[Bytes]>>; 2],
}

/// The headers of every node and pod family, per encoding.
#[derive(Debug)]
struct Headers {
    nodes: Box<[Bytes]>,
    pods: Box<[Bytes]>,
}

/// The pieces of the page, by their first node (or pod).
#[derive(Debug, Default)]
pub(crate) struct ScrapeBlocks {
    nodes: FxHashMap<Arc<str>, Piece>,
    pods: FxHashMap<PodKey, Piece>,
    headers: [Option<Headers>; 2],
    scrapes: u64,
    /// The scrape each encoding was last asked for in.
    asked: [u64; 2],
}

/// A page's chunks, and what making them took.
#[derive(Debug)]
pub(crate) struct Page {
    pub chunks: Vec<Bytes>,
    pub stats: Stats,
}

/// What assembling a page took, for the debug log.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Stats {
    pub pieces: usize,
    /// Pieces formatted (and compressed) for this page; the others were cached.
    pub formatted: usize,
    pub bytes: usize,
}

fn slot(encoding: PageEncoding) -> usize {
    match encoding {
        PageEncoding::Plain => 0,
        PageEncoding::Gzip => 1,
    }
}

impl ScrapeBlocks {
    /// The collector's part of the page for `view` in `encoding`: cached pieces where
    /// the copies they were formatted from are unchanged, the rest formatted now.
    pub fn page(
        &mut self,
        view: &ScrapeView,
        encoding: PageEncoding,
        legacy: bool,
        tail: Tail,
    ) -> io::Result<Page> {
        let mine = slot(encoding);
        self.scrapes += 1;
        self.asked[mine] = self.scrapes;
        self.drop_unasked();
        let mut stats = Stats::default();

        let nodes = pieces(
            &mut self.nodes,
            view.nodes(),
            |n| (n.starts_piece, n.version),
            encoding,
            |nodes| render(Job::Nodes(nodes), legacy),
            &mut stats,
        )?;
        let pods = pieces(
            &mut self.pods,
            view.pods(),
            |p| (p.starts_piece, p.version),
            encoding,
            |pods| render(Job::Pods(pods), legacy),
            &mut stats,
        )?;
        let headers = match &mut self.headers[mine] {
            Some(h) => h,
            none => none.insert(headers(encoding, legacy)?),
        };
        let tail = render(Job::Tail(tail), legacy)?;
        let (quotas, reservations) = tail.split_at(tail.len().saturating_sub(1));

        // In page order (`metrics::encode_sections`): per GPU, per pod, quotas, per
        // node, reservations.
        let device_families = headers.nodes.len() - NODE_TOTAL_FAMILIES;
        let mut chunks = Vec::new();
        let family = |chunks: &mut Vec<Bytes>, header: &Bytes, of: &[Box<[Bytes]>], f: usize| {
            chunks.push(header.clone());
            chunks.extend(of.iter().filter_map(|piece| piece.get(f)).cloned());
        };
        for f in 0..device_families {
            family(&mut chunks, &headers.nodes[f], &nodes, f);
        }
        for (f, header) in headers.pods.iter().enumerate() {
            family(&mut chunks, header, &pods, f);
        }
        chunks.push(encoding.chunk(quotas.concat().as_bytes())?);
        for f in device_families..headers.nodes.len() {
            family(&mut chunks, &headers.nodes[f], &nodes, f);
        }
        chunks.push(encoding.chunk(reservations.concat().as_bytes())?);
        chunks.retain(|c| !c.is_empty());
        stats.bytes = chunks.iter().map(Bytes::len).sum();
        Ok(Page { chunks, stats })
    }

    /// Drops the pieces of an encoding not asked for in the last [`KEEP_UNASKED`] scrapes.
    fn drop_unasked(&mut self) {
        for other in 0..2 {
            // Once, the scrape after the last one it could still be asked for in.
            if self.scrapes - self.asked[other] != KEEP_UNASKED + 1 {
                continue;
            }
            self.headers[other] = None;
            let pieces = self.nodes.values_mut().chain(self.pods.values_mut());
            for piece in pieces {
                piece.encoded[other] = None;
            }
        }
    }
}

/// The headers of the node and pod families in `encoding`.
fn headers(encoding: PageEncoding, legacy: bool) -> io::Result<Headers> {
    let encode = |job| -> io::Result<Box<[Bytes]>> {
        let text = render_text(job, legacy)?;
        families(&text)
            .map(|(header, _)| encoding.chunk(header.as_bytes()))
            .collect()
    };
    Ok(Headers {
        nodes: encode(Job::Nodes(Vec::new()))?,
        pods: encode(Job::Pods(Vec::new()))?,
    })
}

/// Cuts `items` (in page order) into pieces, each starting at an item `start_version`
/// says starts one, and returns each piece's text per family in `encoding`: from `cache`
/// where the piece's versions are unchanged, else formatted by `format` (and cached).
/// Pieces no longer on the page leave the cache.
fn pieces<'v, K, V>(
    cache: &mut FxHashMap<K, Piece>,
    items: impl Iterator<Item = (&'v K, &'v Arc<V>)>,
    start_version: impl Fn(&V) -> (bool, u64),
    encoding: PageEncoding,
    format: impl Fn(Vec<Arc<V>>) -> io::Result<Vec<String>>,
    stats: &mut Stats,
) -> io::Result<Vec<Box<[Bytes]>>>
where
    K: Clone + Eq + Hash + 'v,
    V: 'v,
{
    let mut old = std::mem::take(cache);
    let mut out = Vec::new();
    let mut finish = |run: &mut Vec<(&'v K, &'v Arc<V>)>| -> io::Result<()> {
        let Some((first, _)) = run.first() else {
            return Ok(());
        };
        let versions: Vec<u64> = run.iter().map(|(_, v)| start_version(v).1).collect();
        let mut piece = old
            .remove(*first)
            .filter(|p| p.versions == versions)
            .unwrap_or(Piece {
                versions,
                encoded: [None, None],
            });
        let encoded = match &mut piece.encoded[slot(encoding)] {
            Some(encoded) => encoded,
            none => {
                let items: Vec<Arc<V>> = run.iter().map(|(_, v)| Arc::clone(v)).collect();
                let texts = format(items)?;
                stats.formatted += 1;
                none.insert(
                    texts
                        .iter()
                        .map(|t| encoding.chunk(t.as_bytes()))
                        .collect::<io::Result<_>>()?,
                )
            }
        };
        out.push(encoded.clone());
        cache.insert((*first).clone(), piece);
        run.clear();
        Ok(())
    };
    let mut run = Vec::new();
    for (key, item) in items {
        if !run.is_empty() && start_version(item).0 {
            finish(&mut run)?;
        }
        run.push((key, item));
    }
    finish(&mut run)?;
    stats.pieces += out.len();
    Ok(out)
}

/// What one formatting renders.
#[derive(Debug)]
enum Job {
    /// The per-GPU and per-node families of these nodes.
    Nodes(Vec<Arc<NodeCopy>>),
    /// The per-pod families of these pods.
    Pods(Vec<Arc<PodCopy>>),
    /// The quota families and the reservations gauge.
    Tail(Tail),
}

/// A [`Job`] as a collector, so its text comes from the same encoder (and the same
/// family definitions, [`encode_sections`]) as a page encoded in one go.
#[derive(Debug)]
struct Render {
    job: Job,
    legacy: bool,
}

impl Collector for Render {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let nodes: Vec<&NodeCopy>;
        let pods: Vec<&PodCopy>;
        let sections = match &self.job {
            Job::Nodes(n) => {
                nodes = n.iter().map(|n| &**n).collect();
                Sections {
                    nodes: Some(&nodes),
                    ..Sections::default()
                }
            }
            Job::Pods(p) => {
                pods = p.iter().map(|p| &**p).collect();
                Sections {
                    pods: Some(&pods),
                    ..Sections::default()
                }
            }
            Job::Tail(tail) => Sections {
                tail: Some(tail),
                ..Sections::default()
            },
        };
        encode_sections(&mut encoder, sections, self.legacy)
    }
}

/// The text of `job`'s families, headers included.
fn render_text(job: Job, legacy: bool) -> io::Result<String> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Render { job, legacy }));
    let mut text = String::new();
    prometheus_client::encoding::text::encode_registry(&mut text, &registry)
        .map_err(|e| io::Error::other(format!("formatting metrics failed: {e}")))?;
    Ok(text)
}

/// The rows of each of `job`'s families (headers left out; the tail's families whole).
fn render(job: Job, legacy: bool) -> io::Result<Vec<String>> {
    let whole = matches!(job, Job::Tail(_));
    let text = render_text(job, legacy)?;
    Ok(families(&text)
        .map(|(header, rows)| {
            if whole {
                format!("{header}{rows}")
            } else {
                rows.to_string()
            }
        })
        .collect())
}

/// Each family of `text` (OpenMetrics text without `# EOF`) as its header lines (`# HELP`,
/// `# TYPE`, ...) and its rows.
fn families(text: &str) -> impl Iterator<Item = (&str, &str)> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        // Header lines start with '#', rows never do; the next family starts at the
        // next `# HELP` line (right after this header, for a family of no rows).
        let header_end = line_starts(rest)
            .find(|&i| !rest[i..].starts_with('#') || rest[i..].starts_with("# HELP "))
            .unwrap_or(rest.len());
        let family_end = line_starts(rest)
            .skip_while(|&i| i < header_end)
            .find(|&i| rest[i..].starts_with("# HELP "))
            .unwrap_or(rest.len());
        let (family, next) = rest.split_at(family_end);
        rest = next;
        Some(family.split_at(header_end))
    })
}

/// The byte offset of each line of `text` after the first.
fn line_starts(text: &str) -> impl Iterator<Item = usize> + '_ {
    text.match_indices('\n')
        .map(|(i, _)| i + 1)
        .filter(move |&i| i < text.len())
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::sync::Mutex;

    use flate2::read::MultiGzDecoder;
    use hami_core::codec::encode_node_register_json;
    use hami_core::config::DeviceConfig;
    use hami_core::model::DeviceInfo;
    use hami_core::vendor::VendorRegistry;
    use hami_k8s::quotas::QuotaCache;
    use hami_server::metrics_page::encode_page;
    use k8s_openapi::api::core::v1::{Node, Pod};
    use serde_json::json;

    use super::*;
    use crate::metrics::Metrics;
    use crate::state::SchedState;

    const NOW: i64 = 1_800_000_000;
    const NODES: usize = 100;
    const PODS: usize = 700;

    fn gpu(node: &str, index: u32) -> DeviceInfo {
        DeviceInfo {
            id: format!("{node}-g{index}").into(),
            index,
            count: 10,
            mem_mib: 16_000,
            cores: 100,
            dev_type: "NVIDIA-A100".into(),
            numa: 0,
            mode: "hami-core".into(),
            health: true,
            mig_profiles: vec![],
            custom_info: Default::default(),
        }
    }

    fn node(name: &str) -> Node {
        let register = encode_node_register_json(&[gpu(name, 0), gpu(name, 1)]);
        serde_json::from_value(json!({
            "metadata": {"name": name, "uid": format!("uid-{name}"),
                         "annotations": {"hami.io/node-nvidia-register": register}},
            "status": {"allocatable": {"nvidia.com/gpu": "20"}}
        }))
        .unwrap()
    }

    /// A running pod holding `mem` MiB and 10% of `node`'s GPU `gpu`.
    fn pod(uid: &str, namespace: &str, node: &str, gpu: u32, mem: u32) -> Pod {
        let devices = format!("{node}-g{gpu},NVIDIA,{mem},10:;");
        serde_json::from_value(json!({
            "metadata": {"name": format!("p-{uid}"), "namespace": namespace, "uid": uid,
                "annotations": {
                    "hami.io/vgpu-node": node,
                    "hami.io/vgpu-time": NOW.to_string(),
                    "hami.io/vgpu-devices-allocated": devices,
                    "hami.io/vgpu-devices-to-allocate": devices,
                    "hami.io/bind-phase": "success",
                }},
            "spec": {"containers": [{"name": "c", "image": "x"}], "nodeName": node},
            "status": {"phase": "Running"}
        }))
        .unwrap()
    }

    fn cluster() -> SchedState {
        let mut st = SchedState::new(VendorRegistry::from_config(&DeviceConfig::default()), 60);
        for n in 0..NODES {
            st.apply_node(&node(&format!("node-{n:03}")));
        }
        for p in 0..PODS {
            let (namespace, node) = (format!("ns-{}", p % 3), format!("node-{:03}", p % NODES));
            st.apply_pod(
                &pod(&format!("u{p}"), &namespace, &node, (p % 2) as u32, 100),
                NOW,
            );
        }
        st
    }

    fn concat(chunks: &[Bytes]) -> Vec<u8> {
        chunks.iter().flat_map(|c| c.iter().copied()).collect()
    }

    /// The page served plain and gzip (decoded), and the page encoded in one go.
    fn pages(registry: &Registry) -> [String; 3] {
        let mut whole = String::new();
        prometheus_client::encoding::text::encode(&mut whole, registry).unwrap();
        let plain = String::from_utf8(concat(&encode_page(registry, PageEncoding::Plain).unwrap()));
        let gzip = concat(&encode_page(registry, PageEncoding::Gzip).unwrap());
        let mut decoded = String::new();
        MultiGzDecoder::new(&gzip[..])
            .read_to_string(&mut decoded)
            .unwrap();
        [whole, plain.unwrap(), decoded]
    }

    fn assert_same(pages: &[String; 3]) {
        let [whole, plain, gzip] = pages;
        assert!(
            whole.len() > 100_000,
            "a page of some size: {}",
            whole.len()
        );
        // Not assert_eq!: a 100 kB diff says nothing; the first difference does.
        for (what, page) in [("plain", plain), ("gzip", gzip)] {
            let at = whole.bytes().zip(page.bytes()).position(|(a, b)| a != b);
            assert!(
                at.is_none() && whole.len() == page.len(),
                "the {what} page differs from the page encoded in one go at byte {at:?} (lengths {} and {}): {:?}",
                whole.len(),
                page.len(),
                at.map(|i| &page[i.saturating_sub(80)..(i + 80).min(page.len())]),
            );
        }
    }

    #[test]
    fn a_page_of_cached_pieces_is_byte_for_byte_the_page_encoded_in_one_go() {
        for legacy in [false, true] {
            let vendors = VendorRegistry::from_config(&DeviceConfig::default());
            let quotas = QuotaCache::new(&vendors);
            let state = Arc::new(Mutex::new(cluster()));
            let mut registry = Registry::default();
            let metrics = Metrics::register(&mut registry, state.clone(), quotas, legacy);
            metrics.filter_done(crate::metrics::FilterOutcome::Placed, Default::default());
            let before = pages(&registry);
            assert_same(&before);
            let gone = "hami_vgpu_memory_allocated_bytes{zone=\"vGPU\",namespace=\"ns-1\",node=\"node-001\",pod=\"p-u1\",";
            let added = "hami_vgpu_memory_allocated_bytes{zone=\"vGPU\",namespace=\"ns-2\",node=\"node-050\",pod=\"p-new\",";
            assert!(before[0].contains(gone) && !before[0].contains(added));

            // A pod goes, another comes: both encodings show it.
            {
                let mut st = state.lock().unwrap();
                st.delete_pod("u1");
                st.apply_pod(&pod("new", "ns-2", "node-050", 1, 700), NOW);
            }
            let after = pages(&registry);
            assert_same(&after);
            for page in &after {
                assert!(!page.contains(gone), "the deleted pod's row is gone");
                assert!(page.contains(added), "the new pod's row is there");
            }
            assert!(
                after[1].contains("hami_gpu_memory_allocated_bytes{zone=\"vGPU\",node=\"node-050\",device_uuid=\"node-050-g1\",device_index=\"1\",device_type=\"NVIDIA-A100\",device_cores=\"10\"} 734003200"),
                "the GPU's usage follows the new pod's 700 MiB and 10%"
            );
            assert_ne!(before[1], after[1]);
        }
    }

    #[test]
    fn a_scrape_formats_only_the_pieces_that_changed() {
        let mut st = cluster();
        let (mut view, mut blocks) = (ScrapeView::default(), ScrapeBlocks::default());
        let mut scrape = |st: &SchedState, encoding| {
            view.refresh(st);
            blocks
                .page(&view, encoding, false, Tail::default())
                .unwrap()
                .stats
        };
        let first = scrape(&st, PageEncoding::Gzip);
        assert!(first.pieces > 6, "{first:?}");
        assert_eq!(first.formatted, first.pieces, "all of it, the first time");
        assert_eq!(
            scrape(&st, PageEncoding::Gzip).formatted,
            0,
            "nothing changed"
        );
        assert_eq!(
            scrape(&st, PageEncoding::Plain).formatted,
            first.pieces,
            "the first plain page"
        );

        st.apply_pod(&pod("new", "ns-2", "node-050", 1, 700), NOW);
        let changed = scrape(&st, PageEncoding::Gzip);
        // Its node's piece, and its own (two, should its key start a piece).
        assert!((2..=3).contains(&changed.formatted), "{changed:?}");
        assert_eq!(scrape(&st, PageEncoding::Gzip).formatted, 0);

        // Plain pages unasked for a while are dropped; asked again, formatted again.
        for _ in 0..KEEP_UNASKED {
            scrape(&st, PageEncoding::Gzip);
        }
        let again = scrape(&st, PageEncoding::Plain);
        assert_eq!(again.formatted, again.pieces);
    }

    #[test]
    fn families_split_at_each_header() {
        let text = "# HELP a A.\n# TYPE a gauge\n# HELP b B.\n# TYPE b gauge\nb 1\nb{x=\"#\"} 2\n# HELP c C.\n# TYPE c gauge\nc 3\n";
        let got: Vec<_> = families(text).collect();
        assert_eq!(
            got,
            [
                ("# HELP a A.\n# TYPE a gauge\n", ""),
                ("# HELP b B.\n# TYPE b gauge\n", "b 1\nb{x=\"#\"} 2\n"),
                ("# HELP c C.\n# TYPE c gauge\n", "c 3\n"),
            ]
        );
    }
}
