//! The tests that need a container engine run where one was prepared
//! (`scripts/test.sh`, or `eval "$(scripts/prepare-engine.sh)"`, sets
//! `KNOTLESS_TEST_ENGINE`); elsewhere `cargo test` lists them as ignored,
//! saying how to run them, and runs everything else.
//!
//! `--version` names the commit the binary was built from
//! (`KNOTLESS_COMMIT`, "unknown" outside a git checkout).
fn main() {
    commit();
    println!("cargo::rustc-check-cfg=cfg(knotless_engine)");
    println!("cargo::rerun-if-env-changed=KNOTLESS_TEST_ENGINE");
    if std::env::var_os("KNOTLESS_TEST_ENGINE").is_some_and(|v| !v.is_empty()) {
        println!("cargo::rustc-cfg=knotless_engine");
    }
}

/// The commit of the checkout being built, and the files that change
/// with it, so a new commit rebuilds the version.
fn commit() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let git = root.join(".git");
    println!("cargo::rerun-if-changed={}", git.join("HEAD").display());
    println!(
        "cargo::rerun-if-changed={}",
        git.join("packed-refs").display()
    );
    if let Ok(head) = std::fs::read_to_string(git.join("HEAD")) {
        if let Some(branch) = head.trim().strip_prefix("ref: ") {
            println!("cargo::rerun-if-changed={}", git.join(branch).display());
        }
    }
    let commit = std::process::Command::new("git")
        .arg("-C")
        .arg(&root)
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo::rustc-env=KNOTLESS_COMMIT={commit}");
}
