//! runner-cli's own memory stays flat while a step prints 200 MB.
//!
//! Alone in its test binary so that the peak RSS of waited-for children
//! is runner-cli's (its steps' shells are far smaller).

use std::process::Command;

#[test]
fn peak_rss_stays_small_with_a_200mb_log() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("checkout")).unwrap();
    std::fs::write(
        dir.path().join("steps.tsv"),
        "flood\tyes 0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz | head -c 200000000\n",
    )
    .unwrap();
    let status = Command::new(env!("CARGO_BIN_EXE_runner-cli"))
        .args([
            "run",
            "--executor",
            "shell",
            "--name",
            "mem",
            "--runner",
            "did:plc:mem",
        ])
        .args(["--log-limit", "none"])
        .arg("--workdir")
        .arg(dir.path().join("checkout"))
        .arg("--steps-file")
        .arg(dir.path().join("steps.tsv"))
        .arg("--outputs")
        .arg(dir.path().join("outputs"))
        .arg("--result")
        .arg(dir.path().join("result.json"))
        .arg("--log")
        .arg(dir.path().join("run.log"))
        .arg("--shell-root")
        .arg(dir.path().join("roots"))
        .status()
        .unwrap();
    assert!(status.success());
    let log_len = std::fs::metadata(dir.path().join("run.log")).unwrap().len();
    assert!(log_len >= 200_000_000, "log holds {log_len} bytes");
    let usage =
        nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN).unwrap();
    let peak_mib = usage.max_rss() / 1024;
    assert!(
        peak_mib <= 64,
        "runner-cli peaked at {peak_mib} MiB for a 200 MB log"
    );
}
