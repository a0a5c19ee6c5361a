//! Where a checkout keeps the traces its tests and benchmarks replay: `data/` at
//! the repository root (contents, provenance and licence in `data/README.md`).

use std::path::{Path, PathBuf};

/// `data/` of the checkout this crate was built from, found from the crate's
/// manifest directory. Meant for tests, benchmarks and examples run with cargo
/// inside the repository; an installed binary takes its paths from flags.
pub fn repo_data_dir() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    // crates/sim -> the repository root.
    manifest.ancestors().nth(2).unwrap_or(manifest).join("data")
}

/// A file of the bundled openb trace, e.g. `openb_pod_list_default.csv.gz`.
pub fn openb(file: &str) -> PathBuf {
    repo_data_dir().join("openb").join(file)
}

/// A file of the bundled golden decisions of the FGD paper's simulator, e.g.
/// `seed42_arrivals.csv.gz`.
pub fn fgd_golden(file: &str) -> PathBuf {
    repo_data_dir().join("fgd-golden").join(file)
}
