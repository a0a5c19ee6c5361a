//! The shared-region layout proven against C: a small C program declares HAMi-core's
//! structs (v0, v1.0 and v1.2, as `docs/monitor.md` documents them), the C compiler checks
//! every offset and size of hami-core's layout tables with `_Static_assert`, and the
//! program writes one file per layout with known values (and a v1.2 file with a slot
//! caught mid-write). The monitor's own reader must read exactly those values.
//!
//! Needs the machine's C compiler (`$CC`, else `cc`); without one the test says so and
//! passes (CI has one).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use hami_core::shared_region::{Layout, RegionError, RegionReader, Usage, V0, V1};
use hami_vgpu_monitor::cache_file::CacheFile;

const C_PROGRAM: &str = r#"
#include <semaphore.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEVS 16
#define PROCS 1024

/* HAMi-core v1.2 (multiprocess_memory_limit.h, MAJOR_VERSION 1, MINOR_VERSION 2) */
typedef struct { uint64_t context_size, module_size, data_size, offset, total, unused[3]; } device_memory_t;
typedef struct { uint64_t dec_util, enc_util, sm_util, unused[3]; } device_util_t;
typedef struct {
    int32_t pid; int32_t hostpid;
    device_memory_t used[DEVS]; uint64_t monitorused[DEVS]; device_util_t device_util[DEVS];
    int32_t status; uint64_t seqlock; uint64_t unused[2];
} slot12_t;
typedef struct {
    int32_t initialized_flag; uint32_t major_version; uint32_t minor_version; int32_t sm_init_flag;
    size_t owner_pid; sem_t sem; uint64_t device_num; char uuids[DEVS][96];
    uint64_t limit[DEVS]; uint64_t sm_limit[DEVS]; slot12_t procs[PROCS];
    int32_t proc_num; int32_t utilization_switch; int32_t recent_kernel; int32_t priority;
    uint64_t last_kernel_time; sem_t sem_postinit;
} region12_t;

/* HAMi-core v1.0/v1.1: the same bytes as padding */
typedef struct {
    int32_t pid; int32_t hostpid;
    device_memory_t used[DEVS]; uint64_t monitorused[DEVS]; device_util_t device_util[DEVS];
    int32_t status; uint64_t unused[3];
} slot10_t;
typedef struct {
    int32_t initialized_flag; uint32_t major_version; uint32_t minor_version; int32_t sm_init_flag;
    size_t owner_pid; sem_t sem; uint64_t device_num; char uuids[DEVS][96];
    uint64_t limit[DEVS]; uint64_t sm_limit[DEVS]; slot10_t procs[PROCS];
    int32_t proc_num; int32_t utilization_switch; int32_t recent_kernel; int32_t priority;
    int64_t last_kernel_time; uint64_t unused[4];
} region10_t;

/* Unversioned (v0) */
typedef struct { uint64_t context_size, module_size, data_size, offset, total; } device_memory0_t;
typedef struct { uint64_t dec_util, enc_util, sm_util; } device_util0_t;
typedef struct {
    int32_t pid; int32_t hostpid;
    device_memory0_t used[DEVS]; uint64_t monitorused[DEVS]; device_util0_t device_util[DEVS];
    int32_t status;
} slot0_t;
typedef struct {
    int32_t initialized_flag; int32_t sm_init_flag; uint32_t owner_pid; char sem[32];
    uint64_t num; char uuids[DEVS][96]; uint64_t limit[DEVS]; uint64_t sm_limit[DEVS];
    slot0_t procs[PROCS];
    int32_t proc_num; int32_t utilization_switch; int32_t recent_kernel; int32_t priority;
} region0_t;

_Static_assert(sizeof(sem_t) == 32, "sem_t is 32 bytes on 64-bit Linux");
/* ASSERTS */

#define NDEV 3
#define NPROC 3

static uint64_t val(int p, int d, int field) { return 1000000ull * (p + 1) + 1000ull * d + field; }
static void uuid_of(char *out, int d) { snprintf(out, 96, "GPU-%08d-2222-3333-4444-555555555555", d); }

#define FILL(R, fill_extra)                                                        \
    do {                                                                           \
        R->initialized_flag = 19920718;                                            \
        R->limit[0] = 0;                                                           \
        for (int d = 0; d < NDEV; d++) {                                           \
            uuid_of(R->uuids[d], d);                                               \
            R->limit[d] = ((uint64_t)d + 1) << 30;                                 \
            R->sm_limit[d] = 10 * ((uint64_t)d + 1);                               \
        }                                                                          \
        for (int p = 0; p < NPROC; p++) {                                          \
            R->procs[p].pid = 100 + p; R->procs[p].hostpid = 5000 + p;             \
            R->procs[p].status = p == 1 ? 0 : 1;                                   \
            for (int d = 0; d < NDEV; d++) {                                       \
                R->procs[p].used[d].context_size = val(p, d, 1);                   \
                R->procs[p].used[d].module_size = val(p, d, 2);                    \
                R->procs[p].used[d].data_size = val(p, d, 3);                      \
                R->procs[p].used[d].offset = val(p, d, 4);                         \
                R->procs[p].used[d].total = val(p, d, 5);                          \
                R->procs[p].monitorused[d] = val(p, d, 6);                         \
                R->procs[p].device_util[d].sm_util = val(p, d, 7);                 \
                R->procs[p].device_util[d].dec_util = val(p, d, 8);                \
                R->procs[p].device_util[d].enc_util = val(p, d, 9);                \
            }                                                                      \
        }                                                                          \
        R->proc_num = NPROC;                                                       \
        R->utilization_switch = 1; R->recent_kernel = 2; R->priority = 1;          \
        fill_extra;                                                                \
    } while (0)

static int dump(const char *dir, const char *name, const void *r, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return 1;
    /* HAMi-core extends the file one byte past the struct. */
    int ok = fwrite(r, n, 1, f) == 1 && fputc(0, f) != EOF;
    return fclose(f) != 0 || !ok;
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    region0_t *r0 = calloc(1, sizeof *r0);
    region10_t *r10 = calloc(1, sizeof *r10);
    region12_t *r12 = calloc(1, sizeof *r12);
    if (!r0 || !r10 || !r12) return 3;
    FILL(r0, r0->num = NDEV);
    FILL(r10, (r10->major_version = 1, r10->minor_version = 0, r10->device_num = NDEV,
               r10->last_kernel_time = 1700000000, r10->procs[0].unused[0] = 7));
    FILL(r12, (r12->major_version = 1, r12->minor_version = 2, r12->device_num = NDEV,
               r12->last_kernel_time = 1700000042, r12->procs[0].seqlock = 4, r12->procs[2].seqlock = 10));
    int bad = dump(argv[1], "v0.cache", r0, sizeof *r0)
            | dump(argv[1], "v1_0.cache", r10, sizeof *r10)
            | dump(argv[1], "v1_2.cache", r12, sizeof *r12);
    /* A writer between its two seqlock increments: odd number, half-updated totals. */
    r12->procs[2].seqlock = 11;
    for (int d = 0; d < NDEV; d++) r12->procs[2].used[d].total = 999999999;
    bad |= dump(argv[1], "v1_2_mid_write.cache", r12, sizeof *r12);
    return bad;
}
"#;

/// `_Static_assert`s of every offset and size in hami-core's tables.
fn asserts() -> String {
    let mut out = String::new();
    let mut check = |what: String, value: usize| {
        out.push_str(&format!(
            "_Static_assert({what} == {value}, \"{}\");\n",
            what.replace('"', "'")
        ));
    };
    for (region, slot, l) in [
        ("region12_t", "slot12_t", &V1),
        ("region10_t", "slot10_t", &V1),
        ("region0_t", "slot0_t", &V0),
    ] {
        let off = |f: &str| format!("offsetof({region}, {f})");
        check(format!("sizeof({region})"), l.size);
        if let Some((major, minor)) = l.versions {
            check(off("major_version"), major);
            check(off("minor_version"), minor);
        }
        let num = if l.versions.is_some() {
            "device_num"
        } else {
            "num"
        };
        check(off(num), l.device_num);
        check(off("uuids"), l.uuids);
        check(off("limit"), l.limit);
        check(off("sm_limit"), l.sm_limit);
        check(off("procs"), l.procs);
        check(off("proc_num"), l.proc_num);
        check(off("utilization_switch"), l.utilization_switch);
        check(off("recent_kernel"), l.recent_kernel);
        check(off("priority"), l.priority);
        if let Some(at) = l.last_kernel_time {
            check(off("last_kernel_time"), at);
        }
        let s = l.slot;
        let soff = |f: &str| format!("offsetof({slot}, {f})");
        check(format!("sizeof({slot})"), s.size);
        check(soff("pid"), s.pid);
        check(soff("hostpid"), s.hostpid);
        check(soff("used"), s.used);
        check(format!("sizeof((({slot}*)0)->used[0])"), s.memory.stride);
        check(soff("used[0].context_size"), s.used + s.memory.context);
        check(soff("used[0].module_size"), s.used + s.memory.module);
        check(soff("used[0].data_size"), s.used + s.memory.data);
        check(soff("used[0].offset"), s.used + s.memory.offset);
        check(soff("used[0].total"), s.used + s.memory.total);
        check(soff("monitorused"), s.monitor_used);
        check(soff("device_util"), s.util);
        check(
            format!("sizeof((({slot}*)0)->device_util[0])"),
            s.util_entry.stride,
        );
        check(soff("device_util[0].dec_util"), s.util + s.util_entry.dec);
        check(soff("device_util[0].enc_util"), s.util + s.util_entry.enc);
        check(soff("device_util[0].sm_util"), s.util + s.util_entry.sm);
        check(soff("status"), s.status);
        if let (Some(at), "slot12_t") = (s.seqlock, slot) {
            check(soff("seqlock"), at);
        }
        if let (Some(at), "slot10_t") = (s.seqlock, slot) {
            check(soff("unused"), at);
        }
    }
    out
}

fn compiler() -> Option<String> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    Command::new(&cc)
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|_| cc)
}

/// Compiles and runs the C program; the directory holding its files.
fn c_written_files() -> Option<(tempfile::TempDir, PathBuf)> {
    let Some(cc) = compiler() else {
        eprintln!(
            "SKIPPED: no C compiler (set CC or install cc); the layout is not checked against C"
        );
        return None;
    };
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("regions.c");
    std::fs::write(&src, C_PROGRAM.replace("/* ASSERTS */", &asserts())).unwrap();
    let bin = dir.path().join("regions");
    let out = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Werror", "-O0", "-o"])
        .arg(&bin)
        .arg(&src)
        .arg("-lpthread")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the C layout does not match hami-core's tables:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let files = dir.path().join("files");
    std::fs::create_dir(&files).unwrap();
    let run = Command::new(&bin).arg(&files).status().unwrap();
    assert!(run.success(), "the C program failed: {run}");
    Some((dir, files))
}

/// The value the C program gives `field` of process `p`, device `d`.
fn val(p: u64, d: u64, field: u64) -> u64 {
    1_000_000 * (p + 1) + 1000 * d + field
}

/// What the reader must report for the C program's files: processes 0 and 2 are live,
/// process 1 is not (status 0).
fn check(usage: &Usage, version: &str, last_kernel_time: i64) {
    assert_eq!(usage.version.to_string(), version);
    assert_eq!((usage.proc_num, usage.live_procs), (3, 2));
    assert_eq!(
        (
            usage.utilization_switch,
            usage.recent_kernel,
            usage.priority,
            usage.last_kernel_time
        ),
        (1, 2, 1, last_kernel_time)
    );
    assert_eq!(usage.devices.len(), 3);
    for (d, dev) in usage.devices.iter().enumerate() {
        let d64 = d as u64;
        let sum = |f| val(0, d64, f) + val(2, d64, f);
        assert_eq!(
            dev.uuid.as_str(),
            Some(format!("GPU-{d:08}-2222-3333-4444-555555555555").as_str())
        );
        assert_eq!((dev.limit, dev.sm_limit), ((d64 + 1) << 30, 10 * (d64 + 1)));
        assert_eq!(
            (dev.context, dev.module, dev.data, dev.offset, dev.used),
            (sum(1), sum(2), sum(3), sum(4), sum(5)),
            "device {d} of {version}"
        );
        assert_eq!((dev.monitor_used, dev.sm_util), (sum(6), sum(7)));
    }
}

fn read(path: &Path) -> Result<Usage, RegionError> {
    let file = CacheFile::open(path).map_err(RegionError::Io)?;
    let mut usage = Usage::default();
    RegionReader::new().read(&file, &mut usage)?;
    Ok(usage)
}

#[test]
fn c_written_regions_of_every_layout_read_exactly() {
    let Some((_keep, files)) = c_written_files() else {
        return;
    };
    check(&read(&files.join("v0.cache")).unwrap(), "v0", 0);
    check(
        &read(&files.join("v1_0.cache")).unwrap(),
        "v1.0",
        1_700_000_000,
    );
    check(
        &read(&files.join("v1_2.cache")).unwrap(),
        "v1.2",
        1_700_000_042,
    );
}

#[test]
fn a_slot_caught_mid_write_is_never_reported_until_the_write_ends() {
    let Some((_keep, files)) = c_written_files() else {
        return;
    };
    let path = files.join("v1_2_mid_write.cache");
    let err = read(&path).unwrap_err();
    assert!(
        matches!(err, RegionError::SlotBusy { slot: 2, .. }),
        "torn slot was accepted or misreported: {err}"
    );
    // The writer finishes: final totals, then the even sequence number.
    let l: &Layout = &V1;
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    let slot = l.slot_offset(2);
    for d in 0..3u64 {
        let at = slot + l.slot.used + d as usize * l.slot.memory.stride + l.slot.memory.total;
        file.write_all_at(&val(2, d, 5).to_le_bytes(), at as u64)
            .unwrap();
    }
    let seq = slot + l.slot.seqlock.unwrap();
    file.write_all_at(&12u64.to_le_bytes(), seq as u64).unwrap();
    check(&read(&path).unwrap(), "v1.2", 1_700_000_042);
}
