//! A node's files as the AMD plugin reads them, written under a directory: for tests,
//! the demo cluster and trying the plugin without hardware. The layout is the one
//! `docs/vendors.md#amd-device-plugin` describes (written for hami-rs, not copied from
//! a capture).

use std::path::Path;

/// One GPU of a fake node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeGpu {
    /// PCI address (`0000:0c:00.0`).
    pub pci_bdf: String,
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

/// `n` MI300X GPUs (304 CUs, 196 288 MiB VRAM as AMD SMI reports a VF), NUMA 0 then 1.
pub fn mi300x(n: u32) -> Vec<FakeGpu> {
    (0..n)
        .map(|i| FakeGpu {
            pci_bdf: format!("0000:{:02x}:00.0", 0x0c + 0x16 * i),
            card: i + 1,
            render: 128 + i,
            numa: i32::from(i >= n.div_ceil(2)),
            unique_id: 0x1407_0000_0000_0000 + u64::from(i),
            uuid: format!("8eff74b5-0000-1000-801b-b56457add{i:03x}"),
            market_name: "AMD Instinct MI300X".into(),
            vram_mib: 196_288,
            cu_count: 304,
        })
        .collect()
}

/// Writes `<root>/sys` (KFD topology with a CPU node 0, amdgpu PCI devices), `<root>/dev`
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
                "cpu_cores_count 0\nsimd_count {}\nsimd_per_cu 4\nlocal_mem_size 0\ngfx_target_version 90402\nlocation_id {}\ndomain {domain}\ndrm_render_minor {}\nunique_id {}\nnum_xcc 8\n",
                g.cu_count * 4,
                (bus << 8) | (slot << 3),
                g.render,
                g.unique_id
            ),
        )?;
        let pci = drivers.join(&g.pci_bdf);
        std::fs::create_dir_all(pci.join(format!("drm/card{}", g.card)))?;
        std::fs::create_dir_all(pci.join(format!("drm/renderD{}", g.render)))?;
        std::fs::write(pci.join("numa_node"), format!("{}\n", g.numa))?;
        std::fs::write(pci.join("current_compute_partition"), "SPX\n")?;
        std::fs::write(pci.join("current_memory_partition"), "NPS1\n")?;
        std::fs::write(dev.join(format!("dri/card{}", g.card)), "")?;
        std::fs::write(dev.join(format!("dri/renderD{}", g.render)), "")?;
        facts.insert(
            g.pci_bdf.clone(),
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
