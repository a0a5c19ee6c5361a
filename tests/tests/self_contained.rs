//! The repository stands on its own: no file of it points outside it (a sibling
//! folder such as `../shared`, or a development machine's `/work/`). A lone clone
//! must build, test and read its docs with nothing beside it; `.ci/lone-clone.sh`
//! proves the same end to end.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers

use std::path::{Path, PathBuf};
use std::process::Command;

/// Text that only makes sense outside the repository.
const FORBIDDEN: &[&str] = &["../shared", "/work/"];

/// This file names the forbidden text on purpose.
const SELF: &str = "tests/tests/self_contained.rs";

fn repo_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// The repository's files, relative to its root: what git tracks, or (without git, e.g.
/// an unpacked archive) every file outside build output and git's own folder.
fn repo_files(root: &Path) -> Vec<PathBuf> {
    let listed = Command::new("git")
        .arg("-C")
        .arg(root)
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .output();
    match listed {
        Ok(out) if out.status.success() => out
            .stdout
            .split(|b| *b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| PathBuf::from(String::from_utf8_lossy(p).into_owned()))
            .collect(),
        _ => {
            let mut files = Vec::new();
            walk(root, Path::new(""), &mut files);
            files
        }
    }
}

fn walk(root: &Path, rel: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(root.join(rel)).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if [".git", "target"].contains(&name.to_string_lossy().as_ref()) {
            continue;
        }
        let path = rel.join(&name);
        if entry.file_type().unwrap().is_dir() {
            walk(root, &path, out);
        } else {
            out.push(path);
        }
    }
}

/// `path:line: text` for every line of a text file holding forbidden text; binary
/// files (the compressed traces) are skipped.
fn offending_lines(root: &Path, rel: &Path) -> Vec<String> {
    let Ok(bytes) = std::fs::read(root.join(rel)) else {
        return Vec::new(); // listed by git but deleted in the work tree
    };
    let Ok(text) = String::from_utf8(bytes) else {
        return Vec::new();
    };
    text.lines()
        .enumerate()
        .filter(|(_, line)| FORBIDDEN.iter().any(|f| line.contains(f)))
        .map(|(i, line)| format!("{}:{}: {}", rel.display(), i + 1, line.trim()))
        .collect()
}

#[test]
fn no_file_points_outside_the_repository() {
    let root = repo_root();
    let files = repo_files(&root);
    assert!(
        files.iter().any(|f| f == Path::new("Cargo.toml")),
        "found no repository files under {}",
        root.display()
    );
    let hits: Vec<String> = files
        .iter()
        .filter(|f| *f != Path::new(SELF))
        .flat_map(|f| offending_lines(&root, f))
        .collect();
    assert!(
        hits.is_empty(),
        "these lines point outside the repository ({FORBIDDEN:?}); put what they need into \
         the repository (data/, docs/) and point there:\n{}",
        hits.join("\n")
    );
}

#[test]
fn the_guard_finds_what_it_looks_for() {
    let dir = std::env::temp_dir().join(format!("hami-self-contained-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("doc.md"),
        "fine\nsee ../shared/openb/x.csv\nand /work/y\n",
    )
    .unwrap();
    std::fs::write(dir.join("blob.gz"), [0x1f, 0x8b, 0xff, 0xfe]).unwrap();
    assert_eq!(
        offending_lines(&dir, Path::new("doc.md")),
        [
            "doc.md:2: see ../shared/openb/x.csv",
            "doc.md:3: and /work/y"
        ]
    );
    assert!(offending_lines(&dir, Path::new("blob.gz")).is_empty());
    let mut walked = Vec::new();
    walk(&dir, Path::new(""), &mut walked);
    walked.sort();
    assert_eq!(walked, [PathBuf::from("blob.gz"), PathBuf::from("doc.md")]);
}
