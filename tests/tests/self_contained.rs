//! The repository stands on its own: no file of it points outside it (a sibling
//! folder such as `../shared`, or a development machine's `/work/`). A lone clone
//! must build, test and read its docs with nothing beside it; `.ci/lone-clone.sh`
//! proves the same end to end. Citations of the repository's docs
//! (`docs/<file>.md#<section>`, in code comments and docs alike) must land on a heading.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers

use std::path::{Path, PathBuf};
use std::process::Command;

/// Text that only makes sense outside the repository: paths beside it, and citations
/// of notes kept there (the repository's own docs carry that knowledge now).
const FORBIDDEN: &[&str] = &[
    "../shared",
    "/work/",
    "reference §",
    "fgd-method",
    "hami-protocol",
    "design invariant",
    "design.md",
];

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
        "fine\nsee ../shared/openb/x.csv\nand /work/y\n// as in reference §4.2\n",
    )
    .unwrap();
    std::fs::write(dir.join("blob.gz"), [0x1f, 0x8b, 0xff, 0xfe]).unwrap();
    assert_eq!(
        offending_lines(&dir, Path::new("doc.md")),
        [
            "doc.md:2: see ../shared/openb/x.csv",
            "doc.md:3: and /work/y",
            "doc.md:4: // as in reference §4.2"
        ]
    );
    assert!(offending_lines(&dir, Path::new("blob.gz")).is_empty());
    let mut walked = Vec::new();
    walk(&dir, Path::new(""), &mut walked);
    walked.sort();
    assert_eq!(walked, [PathBuf::from("blob.gz"), PathBuf::from("doc.md")]);
}

/// The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as `-`.
fn heading_anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors_of(markdown: &str) -> Vec<String> {
    markdown
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| heading_anchor(l.trim_start_matches('#')))
        .collect()
}

fn is_anchor_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_')
}

/// Every `docs/<file>.md#<anchor>` in `text`, as (file, anchor).
fn doc_citations(text: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for (start, _) in text.match_indices("docs/") {
        let rest = &text[start..];
        let Some(md) = rest.find(".md#") else {
            continue;
        };
        let file = &rest[..md + 3];
        if !file["docs/".len()..]
            .chars()
            .all(|c| is_anchor_char(c) || c == '.')
        {
            continue;
        }
        let anchor: String = rest[md + 4..]
            .chars()
            .take_while(|c| is_anchor_char(*c))
            .collect();
        if !anchor.is_empty() {
            found.push((file.to_string(), anchor));
        }
    }
    found
}

#[test]
fn every_cited_doc_section_exists() {
    let root = repo_root();
    let mut missing = Vec::new();
    for rel in repo_files(&root) {
        let Ok(text) = std::fs::read_to_string(root.join(&rel)) else {
            continue;
        };
        for (file, anchor) in doc_citations(&text) {
            let target = std::fs::read_to_string(root.join(&file)).unwrap_or_default();
            if !anchors_of(&target).contains(&anchor) {
                missing.push(format!("{}: {file}#{anchor}", rel.display()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "these citations name a doc or section that does not exist:\n{}",
        missing.join("\n")
    );
}

#[test]
fn citations_and_anchors_are_read_like_github() {
    assert_eq!(
        heading_anchor(" Validation against the paper's simulator"),
        "validation-against-the-papers-simulator"
    );
    assert_eq!(
        heading_anchor("The placement engine in the simulator, and `frag` in the live engine"),
        "the-placement-engine-in-the-simulator-and-frag-in-the-live-engine"
    );
    assert_eq!(
        doc_citations(
            "see `docs/protocol.md#node-lock`, docs/x.md and docs/a b.md#c (docs/simulator.md#fgd-score)."
        ),
        [
            ("docs/protocol.md".to_string(), "node-lock".to_string()),
            ("docs/simulator.md".to_string(), "fgd-score".to_string())
        ]
    );
}
