//! The container side of an allocation: the environment and mounts of the vGPU hook,
//! HAMi-core (`libvgpu.so`, preloaded into every process of the container), which reads
//! them to enforce a GPU slice (`docs/protocol.md#allocate`, step 4).

use std::path::{Path, PathBuf};

use hami_core::model::ContainerDevice;
use hami_kubelet_api::v1beta1::{ContainerAllocateResponse, Mount};

use crate::config::PluginConfig;

pub const ENV_MEMORY_LIMIT_PREFIX: &str = "CUDA_DEVICE_MEMORY_LIMIT_";
pub const ENV_SM_LIMIT: &str = "CUDA_DEVICE_SM_LIMIT";
pub const ENV_SHARED_CACHE: &str = "CUDA_DEVICE_MEMORY_SHARED_CACHE";
pub const ENV_OVERSUBSCRIBE: &str = "CUDA_OVERSUBSCRIBE";
pub const ENV_LOG_LEVEL: &str = "LIBCUDA_LOG_LEVEL";
pub const ENV_CORE_POLICY: &str = "GPU_CORE_UTILIZATION_POLICY";
/// Set to a true value in a container's env to run it without the `libvgpu.so` preload.
pub const ENV_DISABLE_CONTROL: &str = "CUDA_DISABLE_CONTROL";
/// Host and container path of the lock file `libvgpu.so` processes share.
pub const VGPU_LOCK_PATH: &str = "/tmp/vgpulock";
pub const LD_SO_PRELOAD: &str = "/etc/ld.so.preload";

/// One container's grant.
#[derive(Debug, Clone, Copy)]
pub struct ContainerGrant<'a> {
    pub pod_uid: &'a str,
    pub container: &'a str,
    /// The devices the scheduler assigned, in annotation order.
    pub devices: &'a [ContainerDevice],
    /// The container's env sets `CUDA_DISABLE_CONTROL` to a true value.
    pub control_disabled: bool,
}

/// Why a response could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ResponseError {
    #[error("cannot prepare the HAMi-core cache directory {path}: {source}")]
    CacheDir {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Builds the response and creates the container's cache directory on the host
/// (`<hook>/vgpu/containers/<podUID>_<container>`, mode 0777: `libvgpu.so` runs as the
/// container's user).
pub fn container_response(
    cfg: &PluginConfig,
    grant: &ContainerGrant<'_>,
) -> Result<ContainerAllocateResponse, ResponseError> {
    let hook = &cfg.vgpu_hook;
    let vgpu = hook.hook_path.join("vgpu");
    let mut r = ContainerAllocateResponse::default();

    let mut visible: Vec<&str> = Vec::new();
    for d in grant.devices {
        if !visible.contains(&d.uuid.as_str()) {
            visible.push(&d.uuid);
        }
    }
    r.envs
        .insert(cfg.vendor.visible_devices_env.clone(), visible.join(","));
    for (i, d) in grant.devices.iter().enumerate() {
        r.envs.insert(
            format!("{ENV_MEMORY_LIMIT_PREFIX}{i}"),
            format!("{}m", d.mem_mib),
        );
    }
    if let Some(first) = grant.devices.first() {
        r.envs.insert(ENV_SM_LIMIT.into(), first.cores.to_string());
    }
    r.envs.insert(
        ENV_SHARED_CACHE.into(),
        path_string(&vgpu.join(format!("{}.cache", uuid_v4()))),
    );
    if cfg.memory_scaling > 1.0 {
        r.envs.insert(ENV_OVERSUBSCRIBE.into(), "true".into());
    }
    if !hook.lib_cuda_log_level.is_empty() {
        r.envs
            .insert(ENV_LOG_LEVEL.into(), hook.lib_cuda_log_level.clone());
    }
    if hook.disable_core_limit {
        r.envs.insert(ENV_CORE_POLICY.into(), "disable".into());
    }

    let cache_dir = vgpu
        .join("containers")
        .join(format!("{}_{}", grant.pod_uid, grant.container));
    prepare_cache_dir(&cache_dir)?;

    r.mounts.push(mount(
        &vgpu.join("libvgpu.so"),
        &library_on_host(&vgpu, hook.libvgpu_version.as_deref()),
        true,
    ));
    r.mounts.push(mount(&vgpu, &cache_dir, false));
    r.mounts.push(mount(
        Path::new(VGPU_LOCK_PATH),
        Path::new(VGPU_LOCK_PATH),
        false,
    ));
    if !grant.control_disabled {
        r.mounts.push(mount(
            Path::new(LD_SO_PRELOAD),
            &vgpu.join("ld.so.preload"),
            true,
        ));
    }
    if vgpu.join("license").exists() {
        r.mounts.push(mount(
            Path::new("/tmp/license"),
            &vgpu.join("license"),
            true,
        ));
        r.mounts.push(mount(
            Path::new("/usr/bin/vgpuvalidator"),
            &vgpu.join("vgpuvalidator"),
            true,
        ));
    }
    Ok(r)
}

/// `libvgpu.so.<version>` when that file exists, else `libvgpu.so`.
fn library_on_host(vgpu: &Path, version: Option<&str>) -> PathBuf {
    if let Some(v) = version.filter(|v| !v.is_empty()) {
        let versioned = vgpu.join(format!("libvgpu.so.{v}"));
        if versioned.exists() {
            return versioned;
        }
    }
    vgpu.join("libvgpu.so")
}

fn prepare_cache_dir(dir: &Path) -> Result<(), ResponseError> {
    use std::os::unix::fs::PermissionsExt;
    let fail = |source| ResponseError::CacheDir {
        path: dir.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(fail)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).map_err(fail)
}

fn mount(container: &Path, host: &Path, read_only: bool) -> Mount {
    Mount {
        container_path: path_string(container),
        host_path: path_string(host),
        read_only,
    }
}

fn path_string(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// A random RFC 4122 version 4 UUID.
fn uuid_v4() -> String {
    let mut b: [u8; 16] = rand::random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// Whether the container's env turns the vGPU hook off (`CUDA_DISABLE_CONTROL`, Go
/// ParseBool).
pub fn control_disabled(env: &[k8s_openapi::api::core::v1::EnvVar]) -> bool {
    env.iter()
        .filter(|e| e.name == ENV_DISABLE_CONTROL)
        .filter_map(|e| e.value.as_deref())
        .any(|v| matches!(hami_core::codec::parse_go_bool(v), Ok(true)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_has_v4_shape() {
        let u = uuid_v4();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
        assert!(matches!(&u[19..20], "8" | "9" | "a" | "b"));
        assert_ne!(u, uuid_v4());
    }

    #[test]
    fn versioned_library_only_when_present() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            library_on_host(dir.path(), Some("2.5")),
            dir.path().join("libvgpu.so")
        );
        std::fs::write(dir.path().join("libvgpu.so.2.5"), b"").unwrap();
        assert_eq!(
            library_on_host(dir.path(), Some("2.5")),
            dir.path().join("libvgpu.so.2.5")
        );
        assert_eq!(
            library_on_host(dir.path(), None),
            dir.path().join("libvgpu.so")
        );
    }
}
