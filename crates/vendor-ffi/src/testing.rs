//! Fake vendor libraries, built from C at test time with the system C compiler (`$CC`,
//! else `cc`), so tests load them through the real `dlopen` path
//! (`docs/device-plugin.md#vendor-libraries`). Each fake answers from a `fixture.h`
//! written next to it; the sources are `fakes/*.c` of this crate.

use std::io::{Error, ErrorKind};
use std::path::{Path, PathBuf};
use std::process::Command;

/// `fakes/amd_smi.c`.
pub const AMD_SMI_SOURCE: &str = include_str!("../fakes/amd_smi.c");
/// `fakes/libdrm_amdgpu.c`.
pub const LIBDRM_AMDGPU_SOURCE: &str = include_str!("../fakes/libdrm_amdgpu.c");
/// `fakes/vendor_abi.h`: the vendor structs the fakes and the layout test share.
pub const VENDOR_ABI_HEADER: &str = include_str!("../fakes/vendor_abi.h");
/// `fakes/rocm_smi.c`.
pub const ROCM_SMI_SOURCE: &str = include_str!("../fakes/rocm_smi.c");

/// One GPU of the fake AMD SMI.
#[derive(Debug, Clone)]
pub struct FakeSmiGpu {
    /// `dddd:bb:dd.f`.
    pub pci_address: String,
    /// `None`: the UUID call fails with `AMDSMI_STATUS_NOT_SUPPORTED`.
    pub uuid: Option<String>,
    /// `None`: the ASIC info call fails with `AMDSMI_STATUS_NOT_SUPPORTED`.
    pub market_name: Option<String>,
}

/// One device of the fake ROCm SMI.
#[derive(Debug, Clone)]
pub struct FakeDcu {
    /// `dddd:bb:dd.f`.
    pub pci_address: String,
    pub device_id: u16,
    /// `None`: the serial call fails with `RSMI_STATUS_NOT_SUPPORTED`.
    pub serial: Option<String>,
    /// 0: the memory call fails with `RSMI_STATUS_NOT_SUPPORTED`.
    pub vram_bytes: u64,
}

/// The parts of `dddd:bb:dd.f`.
pub fn parse_pci(pci: &str) -> Result<(u64, u64, u64, u64), Error> {
    let bad = || Error::new(ErrorKind::InvalidInput, format!("not a PCI address: {pci}"));
    let (domain, rest) = pci.split_once(':').ok_or_else(bad)?;
    let (bus, rest) = rest.split_once(':').ok_or_else(bad)?;
    let (device, function) = rest.split_once('.').ok_or_else(bad)?;
    let hex = |s: &str| u64::from_str_radix(s, 16).map_err(|_| bad());
    Ok((hex(domain)?, hex(bus)?, hex(device)?, hex(function)?))
}

/// A C string literal for `s` (`NULL` for `None`).
fn c_string(s: Option<&str>) -> String {
    match s {
        None => "NULL".into(),
        Some(s) => format!("{s:?}"),
    }
}

/// Compiles `source` (with `fixture` as `fixture.h` and [`VENDOR_ABI_HEADER`] as
/// `vendor_abi.h` beside it) into `dir/file_name`, a shared library, or an executable
/// when `shared` is false.
pub fn compile(
    dir: &Path,
    file_name: &str,
    source: &str,
    fixture: &str,
    shared: bool,
    defines: &[&str],
) -> Result<PathBuf, Error> {
    let stem = file_name.replace(['.', '/'], "_");
    let src = dir.join(format!("{stem}.c"));
    std::fs::write(&src, source)?;
    std::fs::write(dir.join("fixture.h"), fixture)?;
    std::fs::write(dir.join("vendor_abi.h"), VENDOR_ABI_HEADER)?;
    let out = dir.join(file_name);
    let cc = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
    let mut cmd = Command::new(&cc);
    cmd.arg("-std=c11")
        .arg("-Wall")
        .arg("-Werror")
        .arg("-O0")
        .arg("-I")
        .arg(dir);
    if shared {
        cmd.arg("-shared").arg("-fPIC");
    }
    for d in defines {
        cmd.arg(format!("-D{d}"));
    }
    cmd.arg("-o").arg(&out).arg(&src);
    let result = cmd.output()?;
    if !result.status.success() {
        return Err(Error::other(format!(
            "{} failed on {}: {}",
            cc.to_string_lossy(),
            src.display(),
            String::from_utf8_lossy(&result.stderr)
        )));
    }
    Ok(out)
}

/// A fake `libamd_smi.so` in `dir` knowing `gpus`; `amdsmi_init` returns `init_status`.
pub fn fake_amd_smi(dir: &Path, gpus: &[FakeSmiGpu], init_status: u32) -> Result<PathBuf, Error> {
    let mut rows = String::new();
    for g in gpus {
        let (d, b, dev, f) = parse_pci(&g.pci_address)?;
        rows.push_str(&format!(
            "    {{{d}, {b}, {dev}, {f}, {}, {}}},\n",
            c_string(g.uuid.as_deref()),
            c_string(g.market_name.as_deref())
        ));
    }
    let fixture = format!(
        "static const struct fake_gpu FAKE_GPUS[] = {{\n{rows}    {{0, 0, 0, 0, NULL, NULL}},\n}};\n\
         #define FAKE_GPU_COUNT {}u\n#define FAKE_INIT_STATUS {init_status}u\n",
        gpus.len()
    );
    compile(dir, "libamd_smi.so", AMD_SMI_SOURCE, &fixture, true, &[])
}

/// A fake `libdrm_amdgpu.so.1` in `dir`; its devices are files written by
/// [`drm_node`].
pub fn fake_libdrm_amdgpu(dir: &Path) -> Result<PathBuf, Error> {
    compile(
        dir,
        "libdrm_amdgpu.so.1",
        LIBDRM_AMDGPU_SOURCE,
        "",
        true,
        &["_DEFAULT_SOURCE"],
    )
}

/// The content of a DRM node file the fake libdrm reads: `vram_mib` MiB of VRAM and
/// `cus` active CUs, or with `fail_errno` a failing `amdgpu_device_initialize`.
pub fn drm_node(vram_mib: u64, cus: u32, fail_errno: Option<i32>) -> String {
    match fail_errno {
        Some(e) => format!("fail {e}\n"),
        None => format!("{vram_mib} {cus}\n"),
    }
}

/// A fake `librocm_smi64.so` in `dir` knowing `dcus`; `rsmi_init` returns
/// `init_status`; `omit_serial` leaves `rsmi_dev_serial_number_get` out.
pub fn fake_rocm_smi(
    dir: &Path,
    dcus: &[FakeDcu],
    init_status: u32,
    omit_serial: bool,
) -> Result<PathBuf, Error> {
    let mut rows = String::new();
    for d in dcus {
        let (domain, bus, dev, f) = parse_pci(&d.pci_address)?;
        let bdfid = (domain << 32) | (bus << 8) | (dev << 3) | f;
        rows.push_str(&format!(
            "    {{{bdfid}ull, {}, {}, {}ull}},\n",
            d.device_id,
            c_string(d.serial.as_deref()),
            d.vram_bytes
        ));
    }
    let fixture = format!(
        "static const struct fake_dcu FAKE_DCUS[] = {{\n{rows}    {{0, 0, NULL, 0}},\n}};\n\
         #define FAKE_DCU_COUNT {}u\n#define FAKE_INIT_STATUS {init_status}u\n",
        dcus.len()
    );
    let defines: &[&str] = if omit_serial {
        &["FAKE_OMIT_SERIAL"]
    } else {
        &[]
    };
    compile(
        dir,
        "librocm_smi64.so",
        ROCM_SMI_SOURCE,
        &fixture,
        true,
        defines,
    )
}
