//! What a pod takes of each device, collapsed over its containers.
//!
//! Regular init containers run one at a time before the app containers, so a device
//! carries `max(init peak, app sum)` per dimension, not the sum of both. Sidecars
//! (init containers with `restartPolicy: Always`) keep running, so they count with the
//! app containers and under every regular init container declared after them.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::model::ContainerDevices;
use crate::request::ContainerKind;

/// What one pod holds on one device.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeviceCharge {
    pub uuid: Arc<str>,
    /// The vendor key of the device (`NVIDIA`): whose quota it counts against.
    pub vendor: Arc<str>,
    /// Containers of the pod on the device (at least 1).
    pub slots: u32,
    pub mem: u64,
    pub cores: u64,
}

#[derive(Default, Clone, Copy)]
struct Dims {
    slots: u32,
    mem: u64,
    cores: u64,
}

impl Dims {
    fn plus(self, o: Dims) -> Dims {
        Dims {
            slots: self.slots + o.slots,
            mem: self.mem + o.mem,
            cores: self.cores + o.cores,
        }
    }
    fn max(self, o: Dims) -> Dims {
        Dims {
            slots: self.slots.max(o.slots),
            mem: self.mem.max(o.mem),
            cores: self.cores.max(o.cores),
        }
    }
}

/// Collapses per-container devices into per-device charges. `kinds[i]` is the kind of
/// container `i`; entries beyond `kinds` count as app containers.
pub fn collapse(containers: &[ContainerDevices], kinds: &[ContainerKind]) -> Vec<DeviceCharge> {
    let entries = containers.iter().enumerate().flat_map(|(i, devs)| {
        devs.iter().map(move |d| {
            (
                i,
                d.uuid.as_str(),
                Dims {
                    slots: d.slots_taken(),
                    mem: u64::from(d.mem_mib),
                    cores: u64::from(d.cores),
                },
            )
        })
    });
    collapse_by(entries, kinds)
        .into_iter()
        .map(|(uuid, d)| DeviceCharge {
            uuid: uuid.into(),
            vendor: Arc::default(),
            slots: d.slots.max(1),
            mem: d.mem,
            cores: d.cores,
        })
        .collect()
}

/// [`collapse`] for one vendor's devices of the pod: the charges name the vendor.
pub fn collapse_vendor(
    vendor: &str,
    containers: &[ContainerDevices],
    kinds: &[ContainerKind],
) -> Vec<DeviceCharge> {
    let vendor: Arc<str> = vendor.into();
    let mut charges = collapse(containers, kinds);
    for c in &mut charges {
        c.vendor = vendor.clone();
    }
    charges
}

/// Memory and cores a pod takes in all, collapsed as [`collapse`] does, from
/// `(container, device, MiB, cores)` entries in container order (any device key): what a
/// namespace's ResourceQuota counts for the pod (`docs/protocol.md#resourcequota`).
pub fn collapsed_totals<K: Ord + Copy>(
    entries: impl IntoIterator<Item = (usize, K, u64, u64)>,
    kinds: &[ContainerKind],
) -> (u64, u64) {
    let dims = entries.into_iter().map(|(c, k, mem, cores)| {
        (
            c,
            k,
            Dims {
                slots: 1,
                mem,
                cores,
            },
        )
    });
    collapse_by(dims, kinds)
        .values()
        .fold((0, 0), |(m, c), d| (m + d.mem, c + d.cores))
}

/// The collapse over `(container, device, dims)` entries given in container order.
fn collapse_by<K: Ord + Copy>(
    entries: impl IntoIterator<Item = (usize, K, Dims)>,
    kinds: &[ContainerKind],
) -> BTreeMap<K, Dims> {
    // device -> (running sidecars + apps, init peak)
    let mut running: BTreeMap<K, Dims> = BTreeMap::new();
    let mut init_peak: BTreeMap<K, Dims> = BTreeMap::new();
    let mut own: BTreeMap<K, Dims> = BTreeMap::new();
    let mut current: Option<usize> = None;
    let mut close = |container: usize, own: &mut BTreeMap<K, Dims>| {
        match kinds.get(container).copied().unwrap_or(ContainerKind::App) {
            ContainerKind::Init => {
                // While this init container runs, earlier sidecars run beside it.
                for (key, d) in std::mem::take(own) {
                    let with_sidecars = running.get(&key).copied().unwrap_or_default().plus(d);
                    let peak = init_peak.entry(key).or_default();
                    *peak = peak.max(with_sidecars);
                }
            }
            ContainerKind::Sidecar | ContainerKind::App => {
                for (key, d) in std::mem::take(own) {
                    let e = running.entry(key).or_default();
                    *e = e.plus(d);
                }
            }
        }
    };
    for (container, key, d) in entries {
        if let Some(c) = current
            && c != container
        {
            close(c, &mut own);
        }
        current = Some(container);
        let e = own.entry(key).or_default();
        *e = e.plus(d);
    }
    if let Some(c) = current {
        close(c, &mut own);
    }
    for (key, peak) in init_peak {
        let e = running.entry(key).or_default();
        *e = e.max(peak);
    }
    running
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ContainerDevice;

    fn dev(uuid: &str, mem: u32, cores: u32) -> ContainerDevice {
        ContainerDevice {
            idx: 0,
            uuid: uuid.into(),
            dev_type: "NVIDIA".into(),
            mem_mib: mem,
            slots: 0,
            cores,
        }
    }

    fn charge(uuid: &str, slots: u32, mem: u64, cores: u64) -> DeviceCharge {
        DeviceCharge {
            uuid: uuid.into(),
            slots,
            mem,
            cores,
            ..Default::default()
        }
    }

    #[test]
    fn app_containers_sum() {
        let c = vec![
            vec![dev("A", 100, 10)],
            vec![dev("A", 200, 20), dev("B", 5, 0)],
        ];
        let kinds = [ContainerKind::App, ContainerKind::App];
        assert_eq!(
            collapse(&c, &kinds),
            vec![charge("A", 2, 300, 30), charge("B", 1, 5, 0)]
        );
    }

    #[test]
    fn init_containers_take_the_peak_not_the_sum() {
        let c = vec![
            vec![dev("A", 1000, 50)],
            vec![dev("A", 300, 80)],
            vec![dev("A", 200, 10)],
            vec![],
        ];
        let kinds = [
            ContainerKind::Init,
            ContainerKind::Init,
            ContainerKind::App,
            ContainerKind::App,
        ];
        // mem max(1000, 200), cores max(80, 10), slots max(1, 1)
        assert_eq!(collapse(&c, &kinds), vec![charge("A", 1, 1000, 80)]);
    }

    #[test]
    fn sidecars_run_beside_later_init_containers_and_apps() {
        let c = vec![
            vec![dev("A", 100, 10)],
            vec![dev("A", 1000, 50)],
            vec![dev("A", 200, 10)],
        ];
        let kinds = [
            ContainerKind::Sidecar,
            ContainerKind::Init,
            ContainerKind::App,
        ];
        // init phase: sidecar + init = 1100 / 60 / 2 slots; app phase: 300 / 20 / 2.
        assert_eq!(collapse(&c, &kinds), vec![charge("A", 2, 1100, 60)]);
    }

    #[test]
    fn empty_pod_holds_nothing() {
        assert!(collapse(&[vec![], vec![]], &[]).is_empty());
        assert_eq!(collapsed_totals::<usize>([], &[]), (0, 0));
    }

    #[test]
    fn totals_are_the_sum_of_the_collapsed_charges() {
        let kinds = [ContainerKind::Init, ContainerKind::App, ContainerKind::App];
        let entries = [
            (0, 0, 2100, 2),
            (1, 0, 500, 1),
            (1, 1, 100, 1),
            (2, 1, 100, 5),
        ];
        // Device 0: max(2100, 500) MiB, max(2, 1) cores; device 1: 100 + 100, 1 + 5.
        assert_eq!(collapsed_totals(entries, &kinds), (2300, 8));
    }
}
