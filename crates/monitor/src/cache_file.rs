//! One container's cache file, opened once and read with positioned reads.
//!
//! The file lives in a directory the container itself can write (HAMi-core runs inside
//! it), so it is opened without following symlinks and only kept when it is a regular
//! file with a single link: the monitor runs as root and writes the feedback fields back,
//! and must never be steered into another file. Reads copy only the parts a scan needs
//! (header, the slots in use, the fields after them) into the reader's reused buffers;
//! a file that shrinks underneath gives a short read, never a fault (`docs/monitor.md`).

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use hami_core::shared_region::{Layout, RegionSource};

/// An opened cache file.
#[derive(Debug)]
pub struct CacheFile {
    path: PathBuf,
    file: File,
    /// Inode, to notice a file replaced under the same name.
    ino: u64,
    /// Size when opened. HAMi-core sizes a region once, before it initialises it; a file
    /// that shrinks later fails its reads, which makes the scan open it again.
    len: u64,
}

impl CacheFile {
    /// Opens `path` for reading and the feedback writes.
    pub fn open(path: &Path) -> io::Result<Self> {
        let flags = rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(flags.bits() as i32)
            .open(path)?;
        let meta = file.metadata()?;
        if !meta.file_type().is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file",
            ));
        }
        if meta.nlink() != 1 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "has {} hard links; only a file with one is trusted",
                    meta.nlink()
                ),
            ));
        }
        Ok(CacheFile {
            path: path.to_path_buf(),
            file,
            ino: meta.ino(),
            len: meta.len(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn ino(&self) -> u64 {
        self.ino
    }

    /// Writes one 32-bit field of the region (the feedback fields).
    pub fn write_i32(&self, offset: usize, value: i32) -> io::Result<()> {
        self.file.write_all_at(&value.to_le_bytes(), offset as u64)
    }

    /// Reads one 32-bit field of the region.
    pub fn read_i32(&self, offset: usize) -> io::Result<i32> {
        let mut b = [0u8; 4];
        self.file.read_exact_at(&mut b, offset as u64)?;
        Ok(i32::from_le_bytes(b))
    }

    /// Reads the three feedback inputs (`utilization_switch`, `recent_kernel`,
    /// `priority`), which follow `proc_num` in both layouts.
    pub fn read_feedback_fields(&self, layout: &Layout) -> io::Result<[i32; 3]> {
        let mut b = [0u8; 12];
        self.file
            .read_exact_at(&mut b, layout.utilization_switch as u64)?;
        let at = |i: usize| i32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Ok([at(0), at(4), at(8)])
    }
}

impl RegionSource for CacheFile {
    fn region_len(&self) -> io::Result<u64> {
        Ok(self.len)
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        FileExt::read_exact_at(&self.file, buf, offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_symlinks_links_and_non_files() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.cache");
        std::fs::write(&real, b"x").unwrap();
        assert!(CacheFile::open(&real).is_ok());
        let link = dir.path().join("link.cache");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert!(CacheFile::open(&link).is_err(), "symlink followed");
        let hard = dir.path().join("hard.cache");
        std::fs::hard_link(&real, &hard).unwrap();
        let err = CacheFile::open(&hard).unwrap_err();
        assert!(err.to_string().contains("2 hard links"), "{err}");
        let sub = dir.path().join("sub.cache");
        std::fs::create_dir(&sub).unwrap();
        assert!(CacheFile::open(&sub).is_err());
    }
}
