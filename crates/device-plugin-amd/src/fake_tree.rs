//! A node's files as the AMD plugin reads them, written under a directory: for tests,
//! the demo cluster and trying the plugin without hardware. The layout is the one
//! `docs/vendors.md#amd-device-plugin` describes (written for hami-rs, not copied from
//! a capture).

use std::path::Path;

/// One GPU, or one partition of a partitioned GPU, of a fake node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeGpu {
    /// PCI address of the physical GPU (`0000:0c:00.0`).
    pub pci_bdf: String,
    /// Partition number (0 for an unpartitioned GPU); KFD's `location_id` function bits.
    pub partition: u32,
    /// `<n>` of `devices/platform/amdgpu_xcp_<n>` for a partition other than 0, whose
    /// DRM nodes live there instead of under the PCI device.
    pub xcp: Option<u32>,
    /// `current_compute_partition` / `current_memory_partition` of the PCI device.
    pub compute_partition: String,
    pub memory_partition: String,
    pub card: u32,
    pub render: u32,
    pub numa: i32,
    /// KFD `unique_id` (ROCr UUID `GPU-%016x`).
    pub unique_id: u64,
    pub uuid: String,
    pub market_name: String,
    pub vram_mib: u64,
    pub cu_count: u32,
}

impl FakeGpu {
    /// The device's own address (the facts' key): the GPU's with the partition number as
    /// the function.
    pub fn address(&self) -> String {
        let base = self
            .pci_bdf
            .rsplit_once('.')
            .map_or(&*self.pci_bdf, |(b, _)| b);
        format!("{base}.{}", self.partition)
    }
}

/// MI300X's XCDs (8) and CUs (304) and VRAM (196 288 MiB as AMD SMI reports a VF).
const MI300X_XCDS: u32 = 8;
const MI300X_CUS: u32 = 304;
const MI300X_VRAM_MIB: u64 = 196_288;

/// `n` MI300X GPUs (304 CUs, 196 288 MiB VRAM as AMD SMI reports a VF), NUMA 0 then 1.
pub fn mi300x(n: u32) -> Vec<FakeGpu> {
    (0..n)
        .map(|i| FakeGpu {
            pci_bdf: format!("0000:{:02x}:00.0", 0x0c + 0x16 * i),
            partition: 0,
            xcp: None,
            compute_partition: "SPX".into(),
            memory_partition: "NPS1".into(),
            card: i + 1,
            render: 128 + i,
            numa: i32::from(i >= n.div_ceil(2)),
            unique_id: 0x1407_0000_0000_0000 + u64::from(i),
            uuid: format!("8eff74b5-0000-1000-801b-b56457add{i:03x}"),
            market_name: "AMD Instinct MI300X".into(),
            vram_mib: MI300X_VRAM_MIB,
            cu_count: MI300X_CUS,
        })
        .collect()
}

/// `n` MI300X GPUs in compute partition mode `compute` (`DPX` = 2 partitions, `QPX` = 4,
/// `CPX` = 8; anything else 1) and memory mode `memory` (`NPS1`, `NPS4`): every partition
/// a device with its share of the CUs and VRAM. GPU `i` has the cards `8i+1..` and
/// render nodes `128+8i..`; partition 0 is the PCI device's, partition `k` is
/// `amdgpu_xcp_<(8-1)i+k-1>` (the driver's numbering). NUMA as in [`mi300x`].
pub fn mi300x_partitioned(n: u32, compute: &str, memory: &str) -> Vec<FakeGpu> {
    let parts = match compute.to_ascii_uppercase().as_str() {
        "DPX" => 2,
        "QPX" => 4,
        "CPX" => MI300X_XCDS,
        _ => 1,
    };
    let mut out = Vec::new();
    for (i, gpu) in mi300x(n).into_iter().enumerate() {
        let i = i as u32;
        for k in 0..parts {
            out.push(FakeGpu {
                partition: k,
                xcp: (k > 0).then(|| (MI300X_XCDS - 1) * i + k - 1),
                compute_partition: compute.into(),
                memory_partition: memory.into(),
                card: MI300X_XCDS * i + 1 + k,
                render: 128 + MI300X_XCDS * i + k,
                unique_id: gpu.unique_id + (u64::from(k) << 8),
                uuid: format!("8eff74b5-0000-1000-80{k:02x}-b56457add{i:03x}"),
                vram_mib: MI300X_VRAM_MIB / u64::from(parts),
                cu_count: MI300X_CUS / parts,
                ..gpu.clone()
            });
        }
    }
    out
}

/// Writes `<root>/sys` (KFD topology with a CPU node 0, amdgpu PCI devices, partitions'
/// platform devices), `<root>/dev`
/// (`kfd`, `dri/card*`, `dri/renderD*` as plain files) and `<root>/gpu-facts.json`.
pub fn write(root: &Path, gpus: &[FakeGpu]) -> std::io::Result<()> {
    let sys = root.join("sys");
    let nodes = sys.join("class/kfd/kfd/topology/nodes");
    std::fs::create_dir_all(nodes.join("0"))?;
    std::fs::write(
        nodes.join("0/properties"),
        "cpu_cores_count 96\nsimd_count 0\ndrm_render_minor 0\nunique_id 0\n",
    )?;
    let drivers = sys.join("module/amdgpu/drivers/pci:amdgpu");
    let dev = root.join("dev");
    std::fs::create_dir_all(dev.join("dri"))?;
    std::fs::write(dev.join("kfd"), "")?;
    let mut facts = serde_json::Map::new();
    for (i, g) in gpus.iter().enumerate() {
        let (domain, rest) = g.pci_bdf.split_once(':').unwrap_or(("0000", &g.pci_bdf));
        let bus = u64::from_str_radix(rest.get(0..2).unwrap_or("0"), 16).unwrap_or(0);
        let slot = u64::from_str_radix(rest.get(3..5).unwrap_or("0"), 16).unwrap_or(0);
        let domain = u64::from_str_radix(domain, 16).unwrap_or(0);
        let node = nodes.join((i + 1).to_string());
        std::fs::create_dir_all(&node)?;
        std::fs::write(
            node.join("properties"),
            format!(
                "cpu_cores_count 0\nsimd_count {}\nsimd_per_cu 4\nlocal_mem_size 0\ngfx_target_version 90402\nlocation_id {}\ndomain {domain}\ndrm_render_minor {}\nunique_id {}\nnum_xcc {}\n",
                g.cu_count * 4,
                (bus << 8) | (slot << 3) | u64::from(g.partition & 0x7),
                g.render,
                g.unique_id,
                MI300X_XCDS * g.cu_count / MI300X_CUS,
            ),
        )?;
        let pci = drivers.join(&g.pci_bdf);
        let drm = match g.xcp {
            None => {
                std::fs::create_dir_all(&pci)?;
                std::fs::write(pci.join("numa_node"), format!("{}\n", g.numa))?;
                std::fs::write(
                    pci.join("current_compute_partition"),
                    format!("{}\n", g.compute_partition),
                )?;
                std::fs::write(
                    pci.join("current_memory_partition"),
                    format!("{}\n", g.memory_partition),
                )?;
                pci.join("drm")
            }
            Some(x) => sys.join(format!("devices/platform/amdgpu_xcp_{x}/drm")),
        };
        std::fs::create_dir_all(drm.join(format!("card{}", g.card)))?;
        std::fs::create_dir_all(drm.join(format!("renderD{}", g.render)))?;
        std::fs::write(dev.join(format!("dri/card{}", g.card)), "")?;
        std::fs::write(dev.join(format!("dri/renderD{}", g.render)), "")?;
        facts.insert(
            g.address(),
            serde_json::json!({
                "uuid": g.uuid, "market_name": g.market_name,
                "vram_mib": g.vram_mib, "cu_count": g.cu_count,
            }),
        );
    }
    std::fs::create_dir_all(&drivers)?;
    std::fs::write(
        root.join("gpu-facts.json"),
        serde_json::Value::Object(facts).to_string(),
    )
}
