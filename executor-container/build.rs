//! Builds `helper/tee.rs`, the step's stream copier (see its docs), for
//! x86_64 Linux with no C library: about 2 KiB, run in the environment
//! at the cost of an exec of that size. Where the toolchain cannot build
//! it (no x86_64 target, no linker), the helper is empty and every
//! environment gets the image's `tee`, as one of another architecture
//! does.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=helper/tee.rs");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default()).join("knotless-tee");
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let built = Command::new(rustc)
        .args([
            "--edition=2021",
            "--crate-type=bin",
            "--crate-name=knotless_tee",
            "--target=x86_64-unknown-linux-gnu",
            "-Copt-level=s",
            "-Cpanic=abort",
            "-Cdebuginfo=0",
            "-Cstrip=symbols",
            "-Crelocation-model=static",
            "-Clink-arg=-nostartfiles",
            "-Clink-arg=-nostdlib",
            "-Clink-arg=-static",
            "-Clink-arg=-Wl,--build-id=none",
            "helper/tee.rs",
            "-o",
        ])
        .arg(&out)
        .output();
    match built {
        Ok(done) if done.status.success() => {}
        Ok(done) => {
            println!(
                "cargo:warning=knotless-tee not built; environments get the image's tee: {}",
                String::from_utf8_lossy(&done.stderr)
                    .lines()
                    .next()
                    .unwrap_or("")
            );
            empty(&out);
        }
        Err(err) => {
            println!("cargo:warning=knotless-tee not built (rustc: {err}); environments get the image's tee");
            empty(&out);
        }
    }
}

fn empty(out: &PathBuf) {
    if let Err(err) = std::fs::write(out, b"") {
        panic!("cannot write {}: {err}", out.display());
    }
}
