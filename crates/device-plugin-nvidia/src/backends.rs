//! Building the selected backend.

use std::sync::Arc;

use hami_device_plugin::{BackendError, DeviceBackend};

use crate::activity::ActivitySource;
use crate::cli::{BackendArgs, BackendKind};
use crate::fake::FakeBackend;
use crate::health::HealthChecks;
use crate::nvml::{HealthTiming, NvmlBackend};

/// The backend the flags select, with its versions for the discovery report.
pub enum Selected {
    Nvml(Arc<NvmlBackend>),
    Fake(Arc<FakeBackend>),
}

impl std::fmt::Debug for Selected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Selected::Nvml(b) => b.fmt(f),
            Selected::Fake(b) => b.fmt(f),
        }
    }
}

impl Selected {
    pub fn build(args: &BackendArgs) -> Result<Self, BackendError> {
        match args.backend {
            BackendKind::Nvml => {
                let checks = HealthChecks::from_env();
                let timing = HealthTiming {
                    hold: args.health_hold,
                    window: args.health_window,
                };
                NvmlBackend::init(args.nvml_lib.as_deref(), checks, timing)
                    .map(|b| Selected::Nvml(Arc::new(b)))
            }
            BackendKind::Fake => {
                let path = args
                    .fake_devices
                    .clone()
                    .ok_or_else(|| BackendError::Init {
                        backend: "fake".into(),
                        detail: "--fake-devices (FAKE_DEVICES) is required with --backend fake"
                            .into(),
                    })?;
                Ok(Selected::Fake(Arc::new(FakeBackend::new(path))))
            }
        }
    }

    pub fn backend(&self) -> Arc<dyn DeviceBackend> {
        match self {
            Selected::Nvml(b) => b.clone(),
            Selected::Fake(b) => b.clone(),
        }
    }

    /// The same GPUs as an activity source (the vGPU monitor's host series).
    pub fn activity(&self) -> Arc<dyn ActivitySource> {
        match self {
            Selected::Nvml(b) => b.clone(),
            Selected::Fake(b) => b.clone(),
        }
    }
}
