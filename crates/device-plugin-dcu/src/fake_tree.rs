//! A node's files as the DCU plugin reads them, written under a directory: for tests,
//! the demo cluster and trying the plugin without hardware. The layout is the one
//! `docs/device-plugin.md#hygon-dcu` describes (written for hami-rs, not copied from a
//! capture): `class/drm/<node>/device` links to the PCI device as on a real node.

use std::path::Path;

/// One DCU of a fake node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeDcu {
    /// PCI address (`0000:3d:00.0`).
    pub pci_bdf: String,
    pub card: u32,
    pub render: u32,
    pub numa: i32,
    /// ROCm SMI's index.
    pub index: u32,
    pub serial: String,
    pub model: String,
    pub memory_mib: u64,
    pub cu_count: u32,
}

impl FakeDcu {
    /// The ID the plugin registers it under (`Dcu::id`: `DCU-<serial>`).
    pub fn id(&self) -> String {
        format!("DCU-{}", self.serial)
    }
}

/// `n` K100_AI DCUs (120 CUs, 65 520 MiB as ROCm SMI reports them), NUMA 0 then 1,
/// serials `SN0001`, `SN0002`, ….
pub fn k100_ai(n: u32) -> Vec<FakeDcu> {
    (0..n)
        .map(|i| FakeDcu {
            pci_bdf: format!("0000:{:02x}:00.0", 0x3d + 3 * i),
            card: i + 1,
            render: 128 + i,
            numa: i32::from(i >= n.div_ceil(2)),
            index: i,
            serial: format!("SN{:04}", i + 1),
            model: "K100_AI".into(),
            memory_mib: 65_520,
            cu_count: 120,
        })
        .collect()
}

/// The PCI address of the fake node's display controller (`card0`, ASPEED's vendor ID),
/// which discovery must leave out.
pub const BMC_PCI: &str = "0000:02:00.0";

/// Writes `<root>/sys` (`class/drm/*` linked to `devices/pci0000:00/<pci>`, with
/// `vendor` and `numa_node`), `<root>/dev` (`kfd`, `mkfd`, `dri/card*`, `dri/renderD*`
/// as plain files; `card0` is a BMC's display) and `<root>/dcu-facts.json`.
pub fn write(root: &Path, dcus: &[FakeDcu]) -> std::io::Result<()> {
    let sys = root.join("sys");
    let pci_root = sys.join("devices/pci0000:00");
    let drm = sys.join("class/drm");
    let dev = root.join("dev");
    std::fs::create_dir_all(dev.join("dri"))?;
    std::fs::create_dir_all(&drm)?;
    std::fs::write(dev.join("kfd"), "")?;
    std::fs::write(dev.join("mkfd"), "")?;
    let pci_device = |pci: &str, vendor: &str, numa: i32| -> std::io::Result<()> {
        let dir = pci_root.join(pci);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("vendor"), format!("{vendor}\n"))?;
        std::fs::write(dir.join("numa_node"), format!("{numa}\n"))
    };
    let drm_node = |name: &str, pci: &str| -> std::io::Result<()> {
        let dir = drm.join(name);
        std::fs::create_dir_all(&dir)?;
        let link = dir.join("device");
        if link.symlink_metadata().is_ok() {
            std::fs::remove_file(&link)?;
        }
        std::os::unix::fs::symlink(format!("../../../devices/pci0000:00/{pci}"), link)?;
        std::fs::write(dev.join("dri").join(name), "")
    };
    pci_device(BMC_PCI, "0x1a03", -1)?;
    drm_node("card0", BMC_PCI)?;
    let mut facts = serde_json::Map::new();
    for d in dcus {
        pci_device(&d.pci_bdf, crate::HYGON_VENDOR_ID, d.numa)?;
        drm_node(&format!("card{}", d.card), &d.pci_bdf)?;
        drm_node(&format!("renderD{}", d.render), &d.pci_bdf)?;
        facts.insert(
            d.pci_bdf.clone(),
            serde_json::json!({
                "index": d.index, "serial": d.serial, "model": d.model,
                "memory_mib": d.memory_mib, "cu_count": d.cu_count,
            }),
        );
    }
    std::fs::write(
        root.join("dcu-facts.json"),
        serde_json::Value::Object(facts).to_string(),
    )
}
