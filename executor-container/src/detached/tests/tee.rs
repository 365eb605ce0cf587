//! The stream copier: what the channel's probe accepts, and that every
//! byte reaches the record whatever happens to the exec's stream.

use super::*;
use std::process::{Command, Stdio};

/// The copier staged in a fresh folder, or `None` where this build has
/// none (it is built for x86_64 Linux only).
fn staged() -> Option<tempfile::TempDir> {
    if TEE.is_empty() || std::env::consts::ARCH != "x86_64" {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    stage_tee(dir.path()).unwrap();
    Some(dir)
}

/// What `_ktee` is after the probe for the state folder `dir`.
fn probed(dir: &Path) -> String {
    let probe = super::super::tee::probe(&dir.display().to_string());
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("{probe}\nprintf %s \"$_ktee\""))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_probe_takes_a_copier_that_copies_and_nothing_else() {
    let Some(dir) = staged() else { return };
    let path = dir.path().join(TEE_FILE);
    assert_eq!(probed(dir.path()), path.display().to_string());

    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(probed(dir.path()), "", "not executable");

    // Something else in its place (a step may write there): a script
    // that says the right word without copying what it read.
    std::fs::write(&path, "#!/bin/sh\necho x\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(probed(dir.path()), "", "a copier that does not copy");

    std::fs::remove_file(&path).unwrap();
    assert_eq!(probed(dir.path()), "", "none");
}

/// Runs the copier with `input` on its stdin and `shell_redirects` for
/// fds 1 and 5; its exit status.
fn copy(dir: &Path, input: &Path, redirects: &str) -> std::process::ExitStatus {
    Command::new("sh")
        .arg("-c")
        .arg(format!("\"$0\" < \"$1\" {redirects}"))
        .arg(dir.join(TEE_FILE))
        .arg(input)
        .status()
        .unwrap()
}

#[test]
fn every_byte_reaches_both_outputs_in_order() {
    let Some(dir) = staged() else { return };
    // 3 MiB and a bit: many of the copier's 64 KiB pieces, and a last
    // one it cannot fill.
    let input = dir.path().join("in");
    let bytes: Vec<u8> = (0..3 * 1024 * 1024 + 4321u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&input, &bytes).unwrap();
    let (live, record) = (dir.path().join("live"), dir.path().join("record"));
    let status = copy(
        dir.path(),
        &input,
        &format!("> '{}' 5> '{}'", live.display(), record.display()),
    );
    assert!(status.success(), "{status}");
    assert!(std::fs::read(&live).unwrap() == bytes, "live");
    assert!(std::fs::read(&record).unwrap() == bytes, "record");
}

#[test]
fn a_broken_exec_stream_leaves_the_record_whole_and_the_step_unblocked() {
    let Some(dir) = staged() else { return };
    let input = dir.path().join("in");
    let bytes = vec![b'x'; 1024 * 1024];
    std::fs::write(&input, &bytes).unwrap();
    let record = dir.path().join("record");
    // The exec's stream is a pipe whose reader goes after 10 bytes, as a
    // cut connection's does: the copier must not die of SIGPIPE (the
    // shell does not ignore it for it) nor stop reading.
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "\"$0\" < \"$1\" 5> '{}' | head -c 10 > /dev/null; echo \"$?\"",
            record.display()
        ))
        .arg(dir.path().join(TEE_FILE))
        .arg(&input)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(std::fs::read(&record).unwrap() == bytes, "record");

    // No record (its recorder gone): the exec's stream still gets all.
    let live = dir.path().join("live");
    let status = copy(dir.path(), &input, &format!("> '{}' 5>&-", live.display()));
    assert!(status.success(), "{status}");
    assert!(std::fs::read(&live).unwrap() == bytes, "live");

    // Neither: it reads to the end, so the step writing never blocks.
    let status = copy(dir.path(), &input, ">&- 5>&-");
    assert!(status.success(), "{status}");
}
