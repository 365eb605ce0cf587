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

/// Imports an image named `tag` that has no `sh` (only busybox, as
/// `/bin/hello`) into the engine, from a root built in `dir`.
pub fn import_image_without_sh(dir: &Path, tag: &str) {
    let root = dir.join("nosh-root");
    std::fs::create_dir_all(root.join("bin")).unwrap();
    let busybox = ["/bin/busybox", "/usr/bin/busybox"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("busybox, as scripts/prepare-engine.sh installs it");
    std::fs::copy(busybox, root.join("bin/hello")).unwrap();
    let imported = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "tar -C '{}' -c . | docker import - {tag}",
            root.display()
        ))
        .output()
        .unwrap();
    assert!(imported.status.success(), "{imported:?}");
}

/// The README's or docs' example containing `marker`, the binary in place
/// of `cargo run -q -p runner-cli --`.
pub fn example_command(marker: &str) -> String {
    example(marker).replace(
        "cargo run -q -p runner-cli --",
        env!("CARGO_BIN_EXE_runner-cli"),
    )
}

/// Runs `command` as a user would paste it, by `sh -ec` in `dir`, with no
/// `RUNNER_DID` of the test's own.
pub fn run_as_written(command: &str, dir: &Path) -> std::process::Output {
    std::process::Command::new("sh")
        .arg("-ec")
        .arg(command)
        .current_dir(dir)
        .env_remove("RUNNER_DID")
        .output()
        .unwrap()
}
