//! What several of runner-cli's test files share: the README's and
//! docs' examples, to be run as written.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The project's root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The `sh` example of README.md or docs/ that contains `marker`, as
/// written.
pub fn example(marker: &str) -> String {
    let root = root();
    let text: String = std::iter::once(root.join("README.md"))
        .chain(
            std::fs::read_dir(root.join("docs"))
                .unwrap()
                .flatten()
                .map(|e| e.path()),
        )
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    text.split("```sh\n")
        .skip(1)
        .filter_map(|b| b.split("\n```").next())
        .find(|b| b.contains(marker))
        .unwrap_or_else(|| panic!("no example in README.md or docs/ contains {marker:?}"))
        .to_string()
}

/// A folder where `examples` is the project's, as in the project's root,
/// for running an example as written.
pub fn beside_examples() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(root().join("examples"), dir.path().join("examples")).unwrap();
    dir
}
