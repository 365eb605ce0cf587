//! Builds the helpers sent into each environment, for x86_64 and for
//! aarch64 Linux with no C library: `helper/tee.rs`, the step's stream
//! copier (about 4 KiB, run at the cost of an exec of that size),
//! `helper/agent.rs`, the step channel's native shell, and `helper/gz.rs`,
//! the compressor of copies out (see their docs). Each is built for each
//! machine whose toolchain is here: x86_64 with the `rustc` building this
//! crate; aarch64 with the first of it and `/usr/bin/rustc` that has the
//! aarch64 `core` (Debian's `libstd-rust-web-dev:arm64`), linked by
//! `ld.lld`. Where one cannot be built, it is an empty file and a warning,
//! and environments of that machine use the image's own `tee` or `gzip`
//! and the shell's start, as one of a third machine does.
//!
//! Each helper built for the machine this crate is built for sets
//! `cfg(knotless_tee)`, `cfg(knotless_agent)` or `cfg(knotless_gz)`, and
//! every one built is named to the crates that depend on this one
//! (`DEP_KNOTLESS_HELPERS_BUILT`, `agent` or `agent.aarch64`), so a test
//! that needs it is ignored, with the reason, where it is missing.
//! `KNOTLESS_REQUIRE_HELPERS=1` (as `.ci/run` sets it) makes a helper
//! missing for either machine a build error.

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
    // The copier and the agent are small before fast: the copier's exec
    // is on every step, the agent's once per channel.
    let helpers = [
        ("knotless-tee", "helper/tee.rs", "s", "the image's tee"),
        (
            "knotless-agent",
            "helper/agent.rs",
            "s",
            "the channel's shell",
        ),
        ("knotless-gz", "helper/gz.rs", "3", "the image's gzip"),
    ];
    let mut built = Vec::new();
    for machine in &MACHINES {
        let compiler = machine.compiler();
        for (name, source, opt_level, instead) in helpers {
            let file = format!("{name}{}", machine.suffix);
            let out = out_dir.join(&file);
            let done = match &compiler {
                Some(rustc) => build(rustc, machine, name, source, opt_level, &out),
                None => Err(format!(
                    "no rustc here has the {} core library",
                    machine.target
                )),
            };
            match done {
                Ok(()) => built.push(format!("{}{}", &name["knotless-".len()..], machine.suffix)),
                Err(why) => {
                    println!(
                        "cargo:warning={file} not built; {} environments get {instead}: {why}",
                        machine.arch
                    );
                    empty(&out);
                }
            }
        }
    }
    // A helper runs here where it was built for this crate's own machine.
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let suffix = MACHINES.iter().find(|m| m.arch == arch).map(|m| m.suffix);
    for name in ["tee", "agent", "gz"] {
        if suffix.is_some_and(|s| built.contains(&format!("{name}{s}"))) {
            println!("cargo::rustc-cfg=knotless_{name}");
        }
    }
    // The aarch64 builds run here too where qemu does aarch64 programs
    // (binfmt_misc, as scripts/prepare-toolchain.sh sets it up): their
    // own tests run then, and are ignored, saying why, where not.
    println!("cargo::rustc-check-cfg=cfg(knotless_aarch64)");
    let qemu = Path::new("/proc/sys/fs/binfmt_misc/qemu-aarch64");
    println!("cargo::rerun-if-changed={}", qemu.display());
    let aarch64 = ["tee", "agent", "gz"]
        .iter()
        .all(|name| built.contains(&format!("{name}.aarch64")));
    if aarch64 && qemu.exists() {
        println!("cargo::rustc-cfg=knotless_aarch64");
    }
    println!("cargo::metadata=built={}", built.join(","));
    let required = std::env::var_os("KNOTLESS_REQUIRE_HELPERS").is_some_and(|v| v == "1");
    let all = helpers.len() * MACHINES.len();
    if required && built.len() < all {
        panic!(
            "KNOTLESS_REQUIRE_HELPERS=1 and only [{}] of the {all} helpers were built: see the \
             warnings above (x86_64: its target and a linker; aarch64: Debian's rustc-web, \
             libstd-rust-web-dev:arm64 and lld, as scripts/prepare-toolchain.sh installs them)",
            built.join(", ")
        );
    }
}

/// A machine the helpers are built for.
struct Machine {
    /// As `uname -m` and `target_arch` name it.
    arch: &'static str,
    target: &'static str,
    /// Added to each helper's file name: none for x86_64, as before.
    suffix: &'static str,
}

const MACHINES: [Machine; 2] = [
    Machine {
        arch: "x86_64",
        target: "x86_64-unknown-linux-gnu",
        suffix: "",
    },
    Machine {
        arch: "aarch64",
        target: "aarch64-unknown-linux-gnu",
        suffix: ".aarch64",
    },
];

impl Machine {
    /// A rustc with this machine's `core`: the one building this crate,
    /// else Debian's.
    fn compiler(&self) -> Option<std::ffi::OsString> {
        let ours = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
        [ours, "/usr/bin/rustc".into()].into_iter().find(|rustc| {
            let libdir = Command::new(rustc)
                .args(["--print", "target-libdir", "--target", self.target])
                .output();
            libdir.ok().filter(|o| o.status.success()).is_some_and(|o| {
                let dir = String::from_utf8_lossy(&o.stdout).trim().to_string();
                std::fs::read_dir(dir).is_ok_and(|entries| {
                    entries
                        .flatten()
                        .any(|e| e.file_name().to_string_lossy().starts_with("libcore-"))
                })
            })
        })
    }

    /// How this machine's helpers are linked: with no C library, static.
    fn link_args(&self) -> &'static [&'static str] {
        match self.arch {
            "x86_64" => &[
                "-Clink-arg=-nostartfiles",
                "-Clink-arg=-nostdlib",
                "-Clink-arg=-static",
                "-Clink-arg=-Wl,--build-id=none",
            ],
            _ => &[
                "-Clinker=ld.lld",
                "-Clinker-flavor=ld",
                "-Clink-arg=-static",
                "-Clink-arg=--build-id=none",
            ],
        }
    }
}

/// Builds helper `name` from `source` for `machine` with `rustc` into `out`;
/// why not, when it could not be.
fn build(
    rustc: &std::ffi::OsStr,
    machine: &Machine,
    name: &str,
    source: &str,
    opt_level: &str,
    out: &Path,
) -> Result<(), String> {
    let built = Command::new(rustc)
        .args([
            "--edition=2021",
            "--crate-type=bin",
            &format!("--crate-name={}", name.replace('-', "_")),
            &format!("--target={}", machine.target),
            &format!("-Copt-level={opt_level}"),
            "-Cpanic=abort",
            "-Cdebuginfo=0",
            "-Cstrip=symbols",
            "-Crelocation-model=static",
        ])
        .args(machine.link_args())
        .args([source, "-o"])
        .arg(out)
        .output();
    match built {
        Ok(done) if done.status.success() => Ok(()),
        Ok(done) => Err(String::from_utf8_lossy(&done.stderr)
            .lines()
            .next()
            .unwrap_or("")
            .to_string()),
        Err(err) => Err(format!("rustc: {err}")),
    }
}

fn empty(out: &Path) {
    if let Err(err) = std::fs::write(out, b"") {
        panic!("cannot write {}: {err}", out.display());
    }
}
