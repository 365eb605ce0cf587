//! runner-cli's memory stays small while it brings back outputs full of
//! symbolic links with long targets, which an ordinary step makes with
//! `ln -s`: the unpacker's record of what links pass through is bounded,
//! not the square of their length.
//!
//! Alone in its test binary so that the peak RSS of waited-for children
//! is runner-cli's.

use std::process::Command;

#[test]
fn peak_rss_stays_small_with_outputs_of_long_links() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("checkout")).unwrap();
    // 400 links, each to a different 4,000-byte path of 2,000 parts
    // (Linux holds link targets up to 4,095 bytes): the first 250 fit the
    // unpacker's record of the paths links pass through, the rest are
    // refused by name, and memory stays bounded either way.
    let script = "deep=a; i=1; while [ $i -lt 1995 ]; do deep=\"a/$deep\"; i=$((i+1)); done; \
                  n=0; while [ $n -lt 400 ]; do ln -s \"d$n/$deep\" \"$OUTPUTS_DIR/l$n\"; n=$((n+1)); done";
    std::fs::write(dir.path().join("steps.tsv"), format!("links\t{script}\n")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_runner-cli"))
        .args([
            "run",
            "--executor",
            "shell",
            "--name",
            "links",
            "--runner",
            "did:plc:links",
        ])
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
        .output()
        .unwrap();
    let log = std::fs::read_to_string(dir.path().join("run.log")).unwrap_or_default();
    assert!(out.status.success(), "{log}");
    let links = std::fs::read_dir(dir.path().join("outputs"))
        .unwrap()
        .count();
    assert!((250..400).contains(&links), "{links} links came back");
    assert!(
        log.contains("links already pass through 524288 paths"),
        "{log}"
    );
    let usage =
        nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN).unwrap();
    let peak_mib = usage.max_rss() / 1024;
    eprintln!("runner-cli peaked at {peak_mib} MiB");
    assert!(
        peak_mib <= 64,
        "runner-cli peaked at {peak_mib} MiB bringing back 400 long links"
    );
}
