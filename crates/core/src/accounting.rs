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
    // uuid -> (running sidecars + apps, init peak)
    let mut running: BTreeMap<&str, Dims> = BTreeMap::new();
    let mut init_peak: BTreeMap<&str, Dims> = BTreeMap::new();
    for (i, devs) in containers.iter().enumerate() {
        let kind = kinds.get(i).copied().unwrap_or(ContainerKind::App);
        let mut own: BTreeMap<&str, Dims> = BTreeMap::new();
        for d in devs {
            let e = own.entry(d.uuid.as_str()).or_default();
            *e = e.plus(Dims {
                slots: 1,
                mem: u64::from(d.mem_mib),
                cores: u64::from(d.cores),
            });
        }
        match kind {
            ContainerKind::Init => {
                // While this init container runs, earlier sidecars run beside it.
                for (uuid, d) in own {
                    let with_sidecars = running.get(uuid).copied().unwrap_or_default().plus(d);
                    let peak = init_peak.entry(uuid).or_default();
                    *peak = peak.max(with_sidecars);
                }
            }
            ContainerKind::Sidecar | ContainerKind::App => {
                for (uuid, d) in own {
                    let e = running.entry(uuid).or_default();
                    *e = e.plus(d);
                }
            }
        }
    }
    let mut all: BTreeMap<&str, Dims> = running;
    for (uuid, peak) in init_peak {
        let e = all.entry(uuid).or_default();
        *e = e.max(peak);
    }
    all.into_iter()
        .map(|(uuid, d)| DeviceCharge {
            uuid: uuid.into(),
            slots: d.slots.max(1),
            mem: d.mem,
            cores: d.cores,
        })
        .collect()
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
            cores,
        }
    }

    fn charge(uuid: &str, slots: u32, mem: u64, cores: u64) -> DeviceCharge {
        DeviceCharge {
            uuid: uuid.into(),
            slots,
            mem,
            cores,
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
    }
}
