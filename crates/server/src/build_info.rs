//! `hami_build_info`: HAMi's constant series naming the build (version, revision,
//! build_date, go_version, compiler, platform), without the `zone` label HAMi's other
//! series carry. Every hami-rs binary that exports HAMi's series registers it.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

/// Registers `hami_build_info` in `registry`.
pub fn register_build_info(registry: &mut Registry) {
    registry.register_collector(Box::new(BuildInfo));
}

#[derive(Debug)]
struct BuildInfo;

/// Go's `GOOS/GOARCH` form of the platform, as HAMi's label shows it.
fn platform() -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    format!("{}/{arch}", std::env::consts::OS)
}

/// The label values: the crate version, the `HAMI_REVISION` and `HAMI_BUILD_DATE` given
/// to the build (`unknown` without them), and the compiler in `go_version`'s place.
pub fn build_labels() -> [(&'static str, String); 6] {
    [
        ("version", env!("CARGO_PKG_VERSION").to_string()),
        (
            "revision",
            option_env!("HAMI_REVISION")
                .unwrap_or("unknown")
                .to_string(),
        ),
        (
            "build_date",
            option_env!("HAMI_BUILD_DATE")
                .unwrap_or("unknown")
                .to_string(),
        ),
        // A Rust build: the label dashboards group by carries the rustc version.
        ("go_version", env!("HAMI_RUSTC_VERSION").to_string()),
        ("compiler", "rustc".to_string()),
        ("platform", platform()),
    ]
}

impl Collector for BuildInfo {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut metric = encoder.encode_descriptor(
            "hami_build_info",
            "A metric with a constant '1' value labeled by version, revision, build_date, go_version, compiler and platform",
            None,
            MetricType::Gauge,
        )?;
        let labels = build_labels();
        let l: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
        ConstGauge::new(1i64).encode(metric.encode_family(&l)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    #[test]
    fn one_series_with_hamis_labels_and_no_zone() {
        let mut registry = Registry::default();
        register_build_info(&mut registry);
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        let line = text
            .lines()
            .find(|l| l.starts_with("hami_build_info{"))
            .unwrap();
        for label in [
            "version=\"",
            "revision=\"",
            "build_date=\"",
            "go_version=\"rustc ",
            "compiler=\"rustc\"",
            "platform=\"linux/",
        ] {
            assert!(line.contains(label), "{label} missing in {line}");
        }
        assert!(!line.contains("zone="), "{line}");
        assert!(line.ends_with(" 1"), "{line}");
    }
}
