//! runner-cli on the Docker executor: the README's example, an unreachable
//! engine, a runner killed mid-run.

#[path = "../common/mod.rs"]
mod common;
use executor_conformance::fixture::assert_valid_result;
use executor_core::RunResult;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

mod operator;
mod reach;
mod recovery;
mod resume;
mod runs;

fn image() -> String {
    std::env::var("KNOTLESS_TEST_IMAGE").unwrap_or_else(|_| "knotless-busybox:local".into())
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

fn cli() -> Command {
    Command::new(env!("CARGO_BIN_EXE_runner-cli"))
}

/// `run` on the test image with no pulling and no network, checkout and
/// result in `dir`, the run log on stdout for the test to follow.
fn run_logging_to_stdout(
    name: &str,
    runner: &str,
    dir: &Path,
    steps: &Path,
) -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = [
        "run",
        "--executor",
        "docker",
        "--image",
        &image(),
        "--pull",
        "never",
        "--network",
        "none",
        "--name",
        name,
        "--runner",
        runner,
        "--log",
        "-",
    ]
    .into_iter()
    .map(Into::into)
    .collect();
    for (flag, value) in [
        ("--workdir", dir.to_path_buf()),
        ("--steps-file", steps.to_path_buf()),
        ("--result", dir.join("result.json")),
    ] {
        args.push(flag.into());
        args.push(value.into());
    }
    args
}

fn result(path: &Path) -> RunResult {
    let r: RunResult = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_valid_result(&r);
    r
}
