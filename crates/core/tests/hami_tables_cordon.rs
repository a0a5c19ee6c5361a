//! HAMi's `TestFit_DeviceCordon` (Project-HAMi/HAMi `pkg/device/<vendor>/
//! device_cordon_test.go`; `TestSDeviceFit_DeviceCordon` for Metax sGPU) for the families
//! whose tables share one shape: two idle devices `dev-0`, `dev-1` (100 slots, 128 MiB,
//! 100 cores) and a request of one device, 64 MiB, 50 cores (AMD: 1000 and 500 MiB, 50 %
//! of 100 compute units). Families whose memory
//! resource counts larger units get the table's MiB scaled so the request is one unit
//! (Iluvatar 256 MiB: × 4; Mthreads 512 MiB: × 8); Metax GPU takes whole GPUs, so its
//! request is the count alone. Cambricon, Biren, Vastai and Enflame run theirs in their
//! own `hami_tables_*.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::hami::{Row, table_fit, table_node, table_reason, table_uuids};
use common::{container, pod};
use hami_core::config::{DeviceConfig, VendorSwitches};
use hami_core::vendor::VendorRegistry;
use k8s_openapi::api::core::v1::Pod;

/// One family's version of the table.
struct Case {
    /// The HAMi package the test comes from.
    hami: &'static str,
    vendor: &'static str,
    /// The devices' memory and what the running pod holds of it: the table's MiB,
    /// scaled for families with larger memory units.
    totalmem: u32,
    usedmem: u64,
    limits: &'static [(&'static str, &'static str)],
    /// The "running pods on a cordoned device are unaffected" subcase is in the test.
    running_case: bool,
}

const CASES: &[Case] = &[
    Case {
        hami: "nvidia",
        vendor: "NVIDIA",
        totalmem: 128,
        usedmem: 64,
        limits: &[
            ("nvidia.com/gpu", "1"),
            ("nvidia.com/gpumem", "64"),
            ("nvidia.com/gpucores", "50"),
        ],
        running_case: true,
    },
    Case {
        hami: "hygon",
        vendor: "DCU",
        totalmem: 128,
        usedmem: 64,
        limits: &[
            ("hygon.com/dcunum", "1"),
            ("hygon.com/dcumem", "64"),
            ("hygon.com/dcucores", "50"),
        ],
        running_case: true,
    },
    Case {
        hami: "iluvatar",
        vendor: "MR-V100",
        totalmem: 512,
        usedmem: 256,
        limits: &[
            ("iluvatar.ai/MR-V100-vgpu", "1"),
            ("iluvatar.ai/MR-V100.vMem", "1"),
            ("iluvatar.ai/MR-V100.vCore", "50"),
        ],
        running_case: true,
    },
    Case {
        hami: "mthreads",
        vendor: "Mthreads",
        totalmem: 1024,
        usedmem: 512,
        limits: &[
            ("mthreads.com/vgpu", "1"),
            ("mthreads.com/sgpu-memory", "1"),
            ("mthreads.com/sgpu-core", "50"),
        ],
        running_case: true,
    },
    Case {
        hami: "metax (TestFit_DeviceCordon)",
        vendor: "Metax-GPU",
        totalmem: 128,
        usedmem: 64,
        limits: &[("metax-tech.com/gpu", "1")],
        running_case: true,
    },
    Case {
        hami: "metax (TestSDeviceFit_DeviceCordon)",
        vendor: "Metax-SGPU",
        totalmem: 128,
        usedmem: 64,
        limits: &[
            ("metax-tech.com/sgpu", "1"),
            ("metax-tech.com/vmemory", "64Mi"),
            ("metax-tech.com/vcore", "50"),
        ],
        running_case: false,
    },
    Case {
        hami: "amd",
        vendor: "AMD",
        totalmem: 1000,
        usedmem: 500,
        limits: &[
            ("amd.com/gpu", "1"),
            ("amd.com/gpumem", "500"),
            ("amd.com/gpucores", "50"),
        ],
        running_case: true,
    },
];

fn registry() -> VendorRegistry {
    VendorRegistry::from_config(&DeviceConfig::default().with_switches(VendorSwitches {
        ascend: true,
        iluvatar: true,
    }))
}

impl Case {
    fn row(&self, id: &'static str, index: u32) -> Row {
        Row::new(id, index, 100, self.totalmem, 100, self.vendor)
    }

    fn pod(&self) -> Pod {
        pod("p", vec![container("main", self.limits)])
    }
}

#[test]
fn fit_device_cordon() {
    let r = registry();
    for c in CASES {
        let (v, p) = (c.vendor, c.pod());
        let rows = [c.row("dev-0", 0), c.row("dev-1", 1)];
        let fit = |rows: &[Row], cordon: &str| table_fit(&r, &table_node(v, rows, cordon), &p);
        // "cordoned device is skipped, healthy sibling still fits"
        let f = fit(&rows, "dev-1, ").unwrap_or_else(|e| panic!("{}: {}", c.hami, e.render()));
        assert_eq!(table_uuids(&f, v), ["dev-0"], "{}", c.hami);
        // "all devices cordoned fails with CardCordoned reason"
        assert_eq!(
            table_reason(fit(&rows, "dev-0,dev-1")),
            "2/2 CardCordoned",
            "{}",
            c.hami
        );
        // "running pods on a cordoned device are unaffected"
        if c.running_case {
            let busy = [c.row("dev-0", 0), c.row("dev-1", 1).used(1, c.usedmem, 50)];
            let n = table_node(v, &busy, "dev-1");
            let f = table_fit(&r, &n, &p).unwrap();
            assert_eq!(table_uuids(&f, v), ["dev-0"], "{}", c.hami);
            assert_eq!(n.node("n").unwrap().device_usage()[1].used, 1, "{}", c.hami);
        }
        // "no annotation or no node info means nothing cordoned"
        for cordon in ["", "   "] {
            let f = fit(&rows, cordon).unwrap();
            assert_eq!(table_uuids(&f, v), ["dev-1"], "{}", c.hami);
        }
    }
}
