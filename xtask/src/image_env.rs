//! The environment an image sets for its binary (`ENV` lines of
//! `deploy/docker/<image>.Dockerfile`): the bench runs a binary as its image does, so
//! what it measures is what ships (`docs/extender.md#memory`).

use std::path::Path;

use anyhow::Context;

/// `ENV KEY=VALUE ...` pairs of the Dockerfile of `image` under `root`, in order.
pub(crate) fn image_env(root: &Path, image: &str) -> anyhow::Result<Vec<(String, String)>> {
    let path = root.join(format!("deploy/docker/{image}.Dockerfile"));
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    env_lines(&text).with_context(|| format!("in {}", path.display()))
}

/// The `KEY=VALUE` pairs of a Dockerfile's `ENV` instructions (one line each; the
/// instruction's continued and legacy `ENV KEY VALUE` forms are refused, not guessed).
fn env_lines(dockerfile: &str) -> anyhow::Result<Vec<(String, String)>> {
    let mut pairs = vec![];
    for line in dockerfile.lines() {
        let Some(rest) = line.trim().strip_prefix("ENV ") else {
            continue;
        };
        anyhow::ensure!(
            !rest.trim_end().ends_with('\\'),
            "ENV continued on the next line is not read: {line:?}"
        );
        for word in rest.split_whitespace() {
            let (key, value) = word
                .split_once('=')
                .with_context(|| format!("ENV without KEY=VALUE: {line:?}"))?;
            pairs.push((key.to_string(), value.trim_matches('"').to_string()));
        }
    }
    Ok(pairs)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn reads_key_value_pairs_and_refuses_forms_it_does_not_read() {
        let file = "FROM x\n# ENV NOT=this\nENV A=1 B=\"two\"\nUSER 1\n  ENV C=3\n";
        let got = env_lines(file).unwrap();
        assert_eq!(
            got,
            [("A", "1"), ("B", "two"), ("C", "3")].map(|(k, v)| (k.to_string(), v.to_string()))
        );
        assert!(env_lines("ENV A=1 \\\n  B=2\n").is_err());
        assert!(env_lines("ENV A 1\n").is_err());
    }

    #[test]
    fn the_scheduler_image_sets_the_allocators_purge_delay() {
        let root = crate::workspace_root();
        let env = image_env(&root, "hami-scheduler").unwrap();
        assert!(
            env.iter()
                .any(|(k, v)| k == "MIMALLOC_PURGE_DELAY" && v.parse::<u32>().is_ok()),
            "{env:?}"
        );
    }
}
