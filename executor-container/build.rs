//! Builds the helpers sent into each environment, for x86_64 Linux with
//! no C library: `helper/tee.rs`, the step's stream copier (about 2 KiB,
//! run at the cost of an exec of that size), `helper/agent.rs`, the
//! step channel's native shell, and `helper/gz.rs`, the
//! compressor of copies out (see their docs). Where the toolchain cannot
//! build one (no x86_64 target, no linker), it is an empty file, and
//! every environment uses the image's own `tee` or `gzip` instead, as
//! one of another architecture does.
//!
//! Each helper that was built, for the architecture this crate is built
//! for, sets `cfg(knotless_tee)`, `cfg(knotless_agent)` or
//! `cfg(knotless_gz)`, and is named to the crates that depend on this one
//! (`DEP_KNOTLESS_HELPERS_BUILT`), so a test that needs it is ignored, with
//! the reason, where it is missing. `KNOTLESS_REQUIRE_HELPERS=1` (as
//! `.ci/run` sets it) makes a missing helper a build error.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    // A folder: cargo looks at every file under it (gz.rs has modules).
    println!("cargo:rerun-if-changed=helper");
    println!("cargo::rerun-if-env-changed=KNOTLESS_REQUIRE_HELPERS");
    for name in ["tee", "agent", "gz"] {
        println!("cargo::rustc-check-cfg=cfg(knotless_{name})");
    }
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default());
    let built = [
        // The copier is small before it is fast: its exec is on every step.
        build(
            "knotless-tee",
            "helper/tee.rs",
            "s",
            "the image's tee",
            &out_dir,
        ),
        // Exec'd once per channel, not per step: small before fast too.
        build(
            "knotless-agent",
            "helper/agent.rs",
            "s",
            "the channel's shell",
            &out_dir,
        ),
        build(
            "knotless-gz",
            "helper/gz.rs",
            "3",
            "the image's gzip",
            &out_dir,
        ),
    ];
    // Built for x86_64: a helper runs where this crate's target is that.
    let runs_here = std::env::var("CARGO_CFG_TARGET_ARCH").is_ok_and(|a| a == "x86_64");
    let here: Vec<&str> = built.into_iter().flatten().filter(|_| runs_here).collect();
    for name in &here {
        println!("cargo::rustc-cfg=knotless_{name}");
    }
    println!("cargo::metadata=built={}", here.join(","));
    let required = std::env::var_os("KNOTLESS_REQUIRE_HELPERS").is_some_and(|v| v == "1");
    if required && here.len() < 3 {
        panic!(
            "KNOTLESS_REQUIRE_HELPERS=1 and only [{}] of the helpers were built for this machine: \
             see the warnings above (the x86_64 target and a linker are needed)",
            here.join(", ")
        );
    }
}

/// Builds helper `name` into `out_dir`; its short name (`agent`) when it
/// was built.
fn build(
    name: &'static str,
    source: &str,
    opt_level: &str,
    instead: &str,
    out_dir: &Path,
) -> Option<&'static str> {
    let out = out_dir.join(name);
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let built = Command::new(rustc)
        .args([
            "--edition=2021",
            "--crate-type=bin",
            &format!("--crate-name={}", name.replace('-', "_")),
            "--target=x86_64-unknown-linux-gnu",
            &format!("-Copt-level={opt_level}"),
            "-Cpanic=abort",
            "-Cdebuginfo=0",
            "-Cstrip=symbols",
            "-Crelocation-model=static",
            "-Clink-arg=-nostartfiles",
            "-Clink-arg=-nostdlib",
            "-Clink-arg=-static",
            "-Clink-arg=-Wl,--build-id=none",
            source,
            "-o",
        ])
        .arg(&out)
        .output();
    match built {
        Ok(done) if done.status.success() => return name.strip_prefix("knotless-"),
        Ok(done) => {
            println!(
                "cargo:warning={name} not built; environments get {instead}: {}",
                String::from_utf8_lossy(&done.stderr)
                    .lines()
                    .next()
                    .unwrap_or("")
            );
            empty(&out);
        }
        Err(err) => {
            println!("cargo:warning={name} not built (rustc: {err}); environments get {instead}");
            empty(&out);
        }
    }
    None
}

fn empty(out: &Path) {
    if let Err(err) = std::fs::write(out, b"") {
        panic!("cannot write {}: {err}", out.display());
    }
}
