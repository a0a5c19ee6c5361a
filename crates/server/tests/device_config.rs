#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The device-config loader every binary uses: defaults, partial files, HAMi's chart
//! file, and errors that name the file and the problem.

use std::path::{Path, PathBuf};

use hami_core::config::{ConfigError, DeviceConfig};
use hami_server::device_config::{DeviceConfigError, load_device_config};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn write(dir: &tempfile::TempDir, text: &str) -> PathBuf {
    let path = dir.path().join("device-config.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn no_file_means_the_chart_defaults() {
    let cfg = load_device_config(None).unwrap();
    assert_eq!(cfg, DeviceConfig::default());
    assert_eq!(cfg.nvidia.resource_count_name, "nvidia.com/gpu");
    assert_eq!(cfg.nvidia.device_split_count, 10);
}

#[test]
fn hami_chart_default_file_loads_as_our_defaults() {
    // HAMi's chart renders every vendor's section; the chart values are the built-in
    // defaults, so the two agree key for key.
    let cfg = load_device_config(Some(&data("hami-chart-device-config.yaml"))).unwrap();
    assert_eq!(cfg, DeviceConfig::default());
    assert_eq!(cfg.nvidia.lib_cuda_log_level, "1");
    assert_eq!(cfg.nvidia.gpu_core_policy, "default");
}

#[test]
fn a_partial_file_keeps_the_defaults_it_leaves_out() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        &dir,
        "nvidia:\n  resourceCountName: example.com/vgpu\n  memoryFactor: 1024\n  deviceSplitCount: 4\n",
    );
    let cfg = load_device_config(Some(&path)).unwrap();
    assert_eq!(cfg.nvidia.resource_count_name, "example.com/vgpu");
    assert_eq!(cfg.nvidia.memory_factor, 1024);
    assert_eq!(cfg.nvidia.device_split_count, 4);
    let defaults = DeviceConfig::default().nvidia;
    assert_eq!(
        cfg.nvidia.resource_memory_name,
        defaults.resource_memory_name
    );
    assert_eq!(cfg.nvidia.default_gpu_num, defaults.default_gpu_num);
    assert_eq!(
        cfg.nvidia.device_memory_scaling,
        defaults.device_memory_scaling
    );

    let empty = write(&dir, "\n");
    assert_eq!(
        load_device_config(Some(&empty)).unwrap(),
        DeviceConfig::default()
    );
}

#[test]
fn a_missing_file_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nope.yaml");
    let err = load_device_config(Some(&path)).unwrap_err();
    assert!(
        matches!(&err, DeviceConfigError::Read { path: p, source } if p == &path && source.kind() == std::io::ErrorKind::NotFound),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.starts_with(&format!("cannot read device config {}: ", path.display())),
        "{text}"
    );

    // A directory is no file either.
    let err = load_device_config(Some(dir.path())).unwrap_err();
    assert!(matches!(err, DeviceConfigError::Read { .. }), "{err:?}");
}

#[test]
fn garbage_is_an_error_naming_the_file_and_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, "nvidia: [1, 2\n\u{0}\u{1}");
    let err = load_device_config(Some(&path)).unwrap_err();
    assert!(
        matches!(&err, DeviceConfigError::Parse { path: p, source: ConfigError::Yaml(_) } if p == &path),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.starts_with(&format!("device config {}: ", path.display())),
        "{text}"
    );
    assert!(text.contains("not valid YAML"), "{text}");

    let path = write(&dir, "nvidia:\n  deviceSplitCount: many\n");
    let text = load_device_config(Some(&path)).unwrap_err().to_string();
    assert!(text.contains("deviceSplitCount"), "{text}");
}

#[test]
fn invalid_values_are_refused_with_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, "nvidia:\n  memoryFactor: 0\n");
    let text = load_device_config(Some(&path)).unwrap_err().to_string();
    assert!(text.contains(&path.display().to_string()), "{text}");
    assert!(
        text.contains("nvidia.memoryFactor must be at least 1"),
        "{text}"
    );

    let path = write(&dir, "nvidia:\n  resourceCountName: ' '\n");
    let text = load_device_config(Some(&path)).unwrap_err().to_string();
    assert!(
        text.contains("nvidia.resourceCountName must not be empty"),
        "{text}"
    );
}
