//! The stream copier: what the channel's probe accepts, and that every
//! byte reaches the record whatever happens to the exec's stream.

use super::*;
use std::process::{Command, Stdio};

/// The copier staged in a fresh folder (the tests that call this are
/// ignored where this build has none: `cfg(knotless_tee)`).
fn staged() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    stage_tee(dir.path()).unwrap();
    dir
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

#[cfg_attr(
    not(knotless_tee),
    ignore = "the copier was not built for this machine (see the build's warning)"
)]
#[test]
fn the_probe_takes_a_copier_that_copies_and_nothing_else() {
    let dir = staged();
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

/// Runs the copier in `dir` with `out` and `err` on its pipes' fds (0
/// and 5), `prefix` as its record's, then `redirects`; its exit status.
fn copy(
    dir: &Path,
    out: &Path,
    err: &Path,
    prefix: &str,
    redirects: &str,
) -> std::process::ExitStatus {
    copy_with(TEE_FILE, dir, out, err, prefix, redirects)
}

/// [`copy`] with the copier `file` (a machine's build).
fn copy_with(
    file: &str,
    dir: &Path,
    out: &Path,
    err: &Path,
    prefix: &str,
    redirects: &str,
) -> std::process::ExitStatus {
    Command::new("sh")
        .arg("-c")
        .arg(format!("\"$0\" - \"$3\" < \"$1\" 5< \"$2\" {redirects}"))
        .arg(dir.join(file))
        .arg(out)
        .arg(err)
        .arg(prefix)
        .status()
        .unwrap()
}

/// The bytes `n` of a stream that no piece boundary hides.
fn pattern(n: usize, salt: u32) -> Vec<u8> {
    (0..n as u32)
        .map(|i| (i.wrapping_add(salt).wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

/// A stream's record, its pieces joined, and how many there are.
fn record(prefix: &str, stream: &str) -> (Vec<u8>, usize) {
    let (mut all, mut n) = (Vec::new(), 0);
    while let Ok(piece) = std::fs::read(format!("{prefix}.{stream}.{n}")) {
        all.extend(piece);
        n += 1;
    }
    (all, n)
}

#[cfg_attr(
    not(knotless_tee),
    ignore = "the copier was not built for this machine (see the build's warning)"
)]
#[test]
fn every_byte_reaches_the_exec_and_the_record_in_order() {
    every_byte_in_order(TEE_FILE);
}

#[cfg_attr(
    not(knotless_aarch64),
    ignore = "the aarch64 copier was not built, or qemu does not run aarch64 programs here"
)]
#[test]
fn every_byte_reaches_the_exec_and_the_record_in_order_on_aarch64() {
    every_byte_in_order(&format!("{TEE_FILE}.aarch64"));
}

fn every_byte_in_order(file: &str) {
    let dir = staged();
    // Many of the copier's 64 KiB reads, and a last one it cannot fill.
    let (out, err) = (pattern(3 * 1024 * 1024 + 4321, 1), pattern(777_777, 2));
    let (out_in, err_in) = (dir.path().join("out-in"), dir.path().join("err-in"));
    std::fs::write(&out_in, &out).unwrap();
    std::fs::write(&err_in, &err).unwrap();
    let (live_out, live_err) = (dir.path().join("live-out"), dir.path().join("live-err"));
    let prefix = dir.path().join("step").display().to_string();
    let status = copy_with(
        file,
        dir.path(),
        &out_in,
        &err_in,
        &prefix,
        &format!("3> '{}' 4> '{}'", live_out.display(), live_err.display()),
    );
    assert!(status.success(), "{status}");
    assert!(std::fs::read(&live_out).unwrap() == out, "live stdout");
    assert!(std::fs::read(&live_err).unwrap() == err, "live stderr");
    assert!(record(&prefix, "out") == (out, 1), "stdout's record");
    assert!(record(&prefix, "err") == (err, 1), "stderr's record");
}

#[cfg_attr(
    not(knotless_tee),
    ignore = "the copier was not built for this machine (see the build's warning)"
)]
#[test]
fn a_record_is_pieces_of_the_chunk_size_and_keeps_the_last_of_a_long_stream() {
    let dir = staged();
    // 12 pieces and a bit: pieces 9 and 11 filling removed the first
    // four, as the image's recorder does.
    let chunk = CHUNK as usize;
    let out = pattern(12 * chunk + 12345, 3);
    let out_in = dir.path().join("out-in");
    std::fs::write(&out_in, &out).unwrap();
    let prefix = dir.path().join("step").display().to_string();
    let status = copy(
        dir.path(),
        &out_in,
        Path::new("/dev/null"),
        &prefix,
        "3>/dev/null 4>/dev/null",
    );
    assert!(status.success(), "{status}");
    for gone in 0..4 {
        assert!(
            !Path::new(&format!("{prefix}.out.{gone}")).exists(),
            "piece {gone} kept"
        );
    }
    for kept in 4..12 {
        let piece = std::fs::read(format!("{prefix}.out.{kept}")).unwrap();
        assert!(
            piece == out[kept * chunk..(kept + 1) * chunk],
            "piece {kept}"
        );
    }
    let last = std::fs::read(format!("{prefix}.out.12")).unwrap();
    assert!(last == out[12 * chunk..], "the last piece");
    assert_eq!(
        std::fs::read(format!("{prefix}.err.0")).unwrap(),
        b"",
        "an empty stream's piece"
    );
}

#[cfg_attr(
    not(knotless_tee),
    ignore = "the copier was not built for this machine (see the build's warning)"
)]
#[test]
fn the_files_of_the_steps_before_go_and_nothing_a_name_matches() {
    let dir = staged();
    let old: Vec<_> = (0..5)
        .map(|i| dir.path().join(format!("stepio-old-{i}.pid")))
        .collect();
    for file in &old {
        std::fs::write(file, "1").unwrap();
    }
    // A name a step chose: as a pattern it would match the live file.
    let live = dir.path().join("stepio-new.out.0");
    std::fs::write(&live, "kept").unwrap();
    let pattern = dir.path().join("stepio-new.ou?.0");
    std::fs::write(&pattern, "").unwrap();
    let list: Vec<String> = old
        .iter()
        .chain([&pattern])
        .map(|f| f.display().to_string())
        .collect();
    let out = Command::new("sh")
        .arg("-c")
        .arg("set -f; \"$0\" - '' $1 < /dev/null 5< /dev/null 3>/dev/null 4>/dev/null")
        .arg(dir.path().join(TEE_FILE))
        .arg(list.join(" "))
        .status()
        .unwrap();
    assert!(out.success());
    assert!(old.iter().all(|f| !f.exists()), "the steps before's files");
    assert!(!pattern.exists(), "the file the list names");
    assert_eq!(std::fs::read_to_string(&live).unwrap(), "kept");
}

#[cfg_attr(
    not(knotless_tee),
    ignore = "the copier was not built for this machine (see the build's warning)"
)]
#[test]
fn a_broken_exec_stream_or_record_leaves_the_rest_whole_and_the_step_unblocked() {
    let dir = staged();
    let input = dir.path().join("in");
    let bytes = vec![b'x'; 1024 * 1024];
    std::fs::write(&input, &bytes).unwrap();
    let prefix = dir.path().join("step").display().to_string();
    // The exec's stream is a pipe whose reader goes after 10 bytes, as a
    // cut connection's does: the copier must not die of SIGPIPE (the
    // shell does not ignore it for it) nor stop reading.
    let out = Command::new("sh")
        .arg("-c")
        .arg("\"$0\" - \"$2\" < \"$1\" 5</dev/null 3>&1 4>/dev/null | head -c 10 > /dev/null; echo \"$?\"")
        .arg(dir.path().join(TEE_FILE))
        .arg(&input)
        .arg(&prefix)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(record(&prefix, "out").0 == bytes, "record");

    // No record (its folder gone): the exec's stream still gets all.
    let live = dir.path().join("live");
    let nowhere = dir.path().join("no-such-folder/step").display().to_string();
    let status = copy(
        dir.path(),
        &input,
        Path::new("/dev/null"),
        &nowhere,
        &format!("3> '{}' 4>/dev/null", live.display()),
    );
    assert!(status.success(), "{status}");
    assert!(std::fs::read(&live).unwrap() == bytes, "live");

    // Neither: it reads to the end, so the step writing never blocks.
    let status = copy(
        dir.path(),
        &input,
        Path::new("/dev/null"),
        &nowhere,
        "3>&- 4>&-",
    );
    assert!(status.success(), "{status}");
}
