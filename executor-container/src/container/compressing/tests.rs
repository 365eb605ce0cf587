//! The compressor of copies out, run here as the environment runs it,
//! and the pack script's choice between it, the image's `gzip` and none.

use super::*;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use tokio::io::AsyncReadExt;

/// The compressor staged in a fresh folder (the tests that call this are
/// ignored where this build has none: `cfg(knotless_gz)`).
fn staged() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    stage_gz(dir.path()).unwrap();
    dir
}

fn compress(dir: &Path, input: &[u8]) -> Vec<u8> {
    compress_with(GZ_FILE, dir, input)
}

/// [`compress`] with the compressor `file` (a machine's build).
fn compress_with(file: &str, dir: &Path, input: &[u8]) -> Vec<u8> {
    let mut child = Command::new(dir.join(file))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success(), "{:?}", out.status);
    out.stdout
}

/// What the runner's decoder makes of `compressed` (it checks the
/// trailer's CRC and length).
fn inflate(compressed: &[u8]) -> Vec<u8> {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(async {
            assert!(compressed.starts_with(&[0x1f, 0x8b]));
            let mut reader = executor_core::tar::gunzip_if_gzipped(compressed)
                .await
                .unwrap();
            let mut back = Vec::new();
            reader.read_to_end(&mut back).await.unwrap();
            back
        })
}

/// Bytes from a small generator, so a failing case can be made again.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Text as a source tree holds: this crate's own sources, repeated.
fn text(len: usize) -> Vec<u8> {
    let mut all = Vec::new();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files: Vec<_> = walk(&src);
    files.sort();
    while all.len() < len {
        for f in &files {
            all.extend(std::fs::read(f).unwrap());
        }
    }
    all.truncate(len);
    all
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[cfg_attr(
    not(knotless_gz),
    ignore = "the compressor was not built for this machine (see the build's warning)"
)]
#[test]
fn every_input_comes_back_whole() {
    every_input_whole(GZ_FILE);
}

#[cfg_attr(
    not(knotless_aarch64),
    ignore = "the aarch64 compressor was not built, or qemu does not run aarch64 programs here"
)]
#[test]
fn every_input_comes_back_whole_on_aarch64() {
    every_input_whole(&format!("{GZ_FILE}.aarch64"));
}

fn every_input_whole(file: &str) {
    let dir = staged();
    let text = text(1 << 20);
    let mut cases: Vec<(String, Vec<u8>)> = vec![
        ("nothing".into(), Vec::new()),
        ("one byte".into(), b"a".to_vec()),
        ("zeros, 1 MiB".into(), vec![0; 1 << 20]),
        ("text, 1 MiB".into(), text.clone()),
    ];
    // Around a match's longest, the window and the piece read at a time.
    for len in [
        3, 4, 5, 258, 259, 32767, 32768, 32769, 131071, 131072, 131073, 262145,
    ] {
        cases.push((format!("text, {len}"), text[..len].to_vec()));
        cases.push((format!("noise, {len}"), noise(len as u64, len)));
        cases.push((format!("zeros, {len}"), vec![0; len]));
    }
    // Text, noise and runs in turn: blocks that change between coded and
    // stored, matches that reach back across pieces.
    let mut mixed = Vec::new();
    for i in 0..200u64 {
        let len = (noise(i, 2)[0] as usize + 1) * 97;
        match i % 4 {
            0 => mixed.extend(noise(i, len)),
            1 => mixed.extend(&text[(i as usize * 3001) % 500_000..][..len * 3]),
            2 => mixed.extend(vec![b'x'; len * 5]),
            _ => mixed.extend(b"ab".repeat(len)),
        }
    }
    cases.push(("mixed".into(), mixed));
    // A few symbols only: short codes, a code-length code of few lengths.
    for (i, alphabet) in [&b"a"[..], b"ab", b"abc\n", b"\x00\xff"].iter().enumerate() {
        let pick = noise(i as u64 + 11, 70_000);
        cases.push((
            format!("alphabet {alphabet:?}"),
            pick.iter()
                .map(|&r| alphabet[r as usize % alphabet.len()])
                .collect(),
        ));
    }
    for (name, input) in &cases {
        let back = inflate(&compress_with(file, dir.path(), input));
        assert!(
            back == *input,
            "{name}: {} bytes back of {}",
            back.len(),
            input.len()
        );
    }
}

#[cfg_attr(
    not(knotless_gz),
    ignore = "the compressor was not built for this machine (see the build's warning)"
)]
#[test]
fn text_shrinks_and_noise_does_not_grow() {
    let dir = staged();
    let text = text(4 << 20);
    let packed = compress(dir.path(), &text).len();
    // gzip -1 makes 34 % of it, gzip -6 28 %.
    assert!(
        packed * 5 < text.len() * 2,
        "text to {packed} bytes of {}",
        text.len()
    );
    let noise = noise(3, 4 << 20);
    let packed = compress(dir.path(), &noise).len();
    assert!(
        packed < noise.len() + noise.len() / 1000,
        "noise to {packed} bytes of {}",
        noise.len()
    );
}

/// A folder of programs that holds only what the pack script may use
/// besides `sh`: `tar` and `uname`, and `gzip` when `gzip` is set.
fn tools(gzip: bool) -> tempfile::TempDir {
    let bin = tempfile::tempdir().unwrap();
    let mut names = vec!["tar", "uname"];
    if gzip {
        names.push("gzip");
    }
    for name in names {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {name}")])
            .output()
            .unwrap();
        let path = String::from_utf8(found.stdout).unwrap();
        std::os::unix::fs::symlink(path.trim(), bin.path().join(name)).unwrap();
    }
    bin
}

/// `PACK_OUT` of a small folder, with `gz` for the compressor and the
/// programs in `bin` for the image's: its status and its stream.
fn pack(gz: &Path, bin: &Path) -> (bool, Vec<u8>) {
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/container");
    let out = Command::new("/bin/sh")
        .args(["-c", PACK_OUT])
        .arg(&folder)
        .arg(gz)
        .env("PATH", bin)
        .output()
        .unwrap();
    (out.status.success(), out.stdout)
}

fn holds_this_folder(tar: &[u8]) -> bool {
    tar.windows(b"compressing.rs".len())
        .any(|w| w == b"compressing.rs")
}

#[cfg_attr(
    not(knotless_gz),
    ignore = "the compressor was not built for this machine (see the build's warning)"
)]
#[test]
fn the_pack_script_compresses_with_the_compressor_where_it_runs() {
    let dir = staged();
    let gz = dir.path().join(GZ_FILE);
    // No gzip in the image: a compressed stream is the compressor's.
    let (ok, stream) = pack(&gz, tools(false).path());
    assert!(ok);
    assert!(holds_this_folder(&inflate(&stream)));

    // One that does not run: the image's gzip, else the tar as it is.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&gz, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (ok, stream) = pack(&gz, tools(false).path());
    assert!(ok);
    assert!(!stream.starts_with(&[0x1f, 0x8b]) && holds_this_folder(&stream));
    if Command::new("sh")
        .args(["-c", "command -v gzip"])
        .output()
        .unwrap()
        .status
        .success()
    {
        let (ok, stream) = pack(&gz, tools(true).path());
        assert!(ok);
        assert!(holds_this_folder(&inflate(&stream)));
    }
}

#[cfg_attr(
    not(knotless_gz),
    ignore = "the compressor was not built for this machine (see the build's warning)"
)]
#[test]
fn the_pack_script_fails_as_tar_does() {
    let dir = staged();
    let out = Command::new("/bin/sh")
        .args(["-c", PACK_OUT, "/no/such/folder"])
        .arg(dir.path().join(GZ_FILE))
        .env("PATH", tools(false).path())
        .output()
        .unwrap();
    assert!(!out.status.success(), "tar failed, the compressor did not");
}

/// An input made non-blocking by whoever shares it (a step can do that
/// to a stream it shares) is waited for, not taken for an error.
#[cfg_attr(
    not(knotless_gz),
    ignore = "the compressor was not built for this machine (see the build's warning)"
)]
#[test]
fn a_non_blocking_input_is_waited_for() {
    use std::io::Read;
    use std::time::{Duration, Instant};
    let dir = staged();
    let (mut ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    theirs.set_nonblocking(true).unwrap();
    let mut child = Command::new(dir.path().join(GZ_FILE))
        .stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Nothing is sent until it has found no input: it is asleep, waiting
    // for some, or it has given up.
    let stat = format!("/proc/{}/stat", child.id());
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        let stat = std::fs::read_to_string(&stat).unwrap_or_default();
        if stat
            .rsplit(") ")
            .next()
            .is_some_and(|rest| rest.starts_with('S'))
        {
            break;
        }
        assert!(Instant::now() < deadline, "neither asleep nor ended");
        std::thread::yield_now();
    }
    let input = text(300_000);
    let sent = input.clone();
    let writer = std::thread::spawn(move || {
        ours.write_all(&sent)?;
        ours.shutdown(std::net::Shutdown::Write)
    });
    let mut out = Vec::new();
    child.stdout.take().unwrap().read_to_end(&mut out).unwrap();
    assert!(child.wait().unwrap().success(), "it gave up on the input");
    let _ = writer.join().unwrap();
    assert!(inflate(&out) == input);
}
