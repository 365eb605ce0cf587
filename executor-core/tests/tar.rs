//! Pack round trips and hostile archives against the untrusted unpacker.

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;

use executor_core::tar::{pack_dir, unpack_untrusted, UnpackError, UnpackLimits};
use futures_util::StreamExt;
use tokio::io::AsyncReadExt;

/// One raw ustar header + data, built by hand so tests can say anything a
/// hostile archive could.
fn raw_entry(name: &str, kind: u8, link: &str, data: &[u8]) -> Vec<u8> {
    let mut h = [0u8; 512];
    h[..name.len()].copy_from_slice(name.as_bytes());
    h[100..107].copy_from_slice(b"0000644");
    h[108..115].copy_from_slice(b"0000000");
    h[116..123].copy_from_slice(b"0000000");
    let size = format!("{:011o}", data.len());
    h[124..135].copy_from_slice(size.as_bytes());
    h[136..147].copy_from_slice(b"00000000000");
    h[156] = kind;
    h[157..157 + link.len()].copy_from_slice(link.as_bytes());
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    h[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
    let mut out = h.to_vec();
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(512) * 512, 0);
    out
}

fn archive(entries: &[Vec<u8>]) -> Vec<u8> {
    let mut out: Vec<u8> = entries.concat();
    out.extend_from_slice(&[0u8; 1024]);
    out
}

async fn unpack(bytes: Vec<u8>, dest: &Path) -> Result<(), UnpackError> {
    unpack_untrusted(&bytes[..], dest, UnpackLimits::default())
        .await
        .map(|_| ())
}

/// Every file under `root`, to show nothing was written outside `dest`.
fn tree(root: &Path) -> Vec<String> {
    let mut all: Vec<String> = walkdir::WalkDir::new(root)
        .into_iter()
        .filter_map(Result::ok)
        .map(|e| e.path().strip_prefix(root).unwrap().display().to_string())
        .collect();
    all.sort();
    all
}

async fn assert_refused(entries: &[Vec<u8>], expect: &str) {
    let outer = tempfile::tempdir().unwrap();
    let dest = outer.path().join("dest");
    let summary = unpack_untrusted(&archive(entries)[..], &dest, UnpackLimits::default())
        .await
        .unwrap();
    let refused = summary.refused.last().expect("an entry was refused");
    assert!(refused.reason.contains(expect), "{refused:?}");
    assert_eq!(summary.refused_count, summary.refused.len() as u64);
    // The refused entry itself is not on disk, as a file or a link.
    assert!(
        std::fs::symlink_metadata(dest.join(&refused.path)).is_err() || refused.path.ends_with('/'),
        "{} was created",
        refused.path
    );
    for path in tree(outer.path()) {
        assert!(
            path.is_empty() || path.starts_with("dest"),
            "{path} was written outside the destination"
        );
    }
    // Nor under another name: no link anywhere in the destination leads out.
    if dest.exists() {
        let leaving = executor_core::tar::links_leaving(&dest).unwrap();
        assert!(leaving.is_empty(), "links lead out: {leaving:?}");
    }
}

#[test]
fn the_link_audit_sees_dangling_chained_and_hard_links_out() {
    let outer = tempfile::tempdir().unwrap();
    let root = outer.path().join("root");
    std::fs::create_dir_all(root.join("d")).unwrap();
    std::fs::write(outer.path().join("secret"), "x").unwrap();
    // Inside: plain, through a folder, and a chain that stays in.
    symlink("d", root.join("to-d")).unwrap();
    symlink("../to-d", root.join("d/back")).unwrap();
    // Out: a chain through an inner link (to the root itself, which is
    // in), dangling; absolute; hard.
    symlink("..", root.join("d/up")).unwrap();
    symlink("d/up/../not-yet", root.join("chained")).unwrap();
    symlink("/nowhere/at/all", root.join("absolute")).unwrap();
    std::fs::hard_link(outer.path().join("secret"), root.join("hard")).unwrap();
    // A hard link between two files inside is fine.
    std::fs::write(root.join("a"), "a").unwrap();
    std::fs::hard_link(root.join("a"), root.join("d/a")).unwrap();
    let root = root.canonicalize().unwrap();
    let leaving = executor_core::tar::links_leaving(&root).unwrap();
    let names: Vec<String> = leaving
        .iter()
        .map(|p| p.strip_prefix(&root).unwrap().display().to_string())
        .collect();
    assert_eq!(names, ["absolute", "chained", "hard"]);
}

#[tokio::test]
async fn refuses_parent_dir() {
    assert_refused(&[raw_entry("../evil", b'0', "", b"x")], "`..`").await;
    assert_refused(&[raw_entry("a/../../evil", b'0', "", b"x")], "`..`").await;
}

#[tokio::test]
async fn refuses_absolute_path() {
    assert_refused(&[raw_entry("/tmp/evil", b'0', "", b"x")], "absolute path").await;
}

#[tokio::test]
async fn refuses_symlink_out() {
    assert_refused(&[raw_entry("l", b'2', "/etc", b"")], "absolute").await;
    assert_refused(&[raw_entry("l", b'2', "../..", b"")], "outside").await;
    assert_refused(&[raw_entry("a/l", b'2', "../../x", b"")], "outside").await;
}

#[tokio::test]
async fn refuses_write_through_symlink() {
    // The link itself points inside, but a later entry goes through it.
    assert_refused(
        &[
            raw_entry("sub/", b'5', "", b""),
            raw_entry("l", b'2', "sub", b""),
            raw_entry("l/x", b'0', "", b"x"),
        ],
        "through symlink",
    )
    .await;
}

#[tokio::test]
async fn refuses_hard_link_out() {
    assert_refused(&[raw_entry("h", b'1', "../../etc/passwd", b"")], "`..`").await;
    assert_refused(&[raw_entry("h", b'1', "/etc/passwd", b"")], "absolute").await;
    assert_refused(
        &[raw_entry("h", b'1', "missing", b"")],
        "not in the archive",
    )
    .await;
}

#[tokio::test]
async fn refuses_devices_and_fifos() {
    assert_refused(&[raw_entry("dev", b'3', "", b"")], "device").await;
    assert_refused(&[raw_entry("dev", b'4', "", b"")], "device").await;
    assert_refused(&[raw_entry("fifo", b'6', "", b"")], "fifo").await;
}

#[tokio::test]
async fn caps_size_and_entries() {
    let dest = tempfile::tempdir().unwrap();
    let bytes = archive(&[raw_entry("big", b'0', "", &[7u8; 4096])]);
    let limits = UnpackLimits {
        max_bytes: 1000,
        ..UnpackLimits::default()
    };
    let err = unpack_untrusted(&bytes[..], dest.path(), limits)
        .await
        .unwrap_err();
    assert!(
        matches!(err, UnpackError::TooLarge { limit: 1000 }),
        "{err}"
    );

    let many: Vec<_> = (0..5)
        .map(|i| raw_entry(&format!("f{i}"), b'0', "", b""))
        .collect();
    let limits = UnpackLimits {
        max_entries: 3,
        ..UnpackLimits::default()
    };
    let err = unpack_untrusted(&archive(&many)[..], dest.path(), limits)
        .await
        .unwrap_err();
    assert!(
        matches!(err, UnpackError::TooManyEntries { limit: 3 }),
        "{err}"
    );
}

#[tokio::test]
async fn truncated_archive_is_an_error() {
    let dest = tempfile::tempdir().unwrap();
    let mut bytes = raw_entry("f", b'0', "", &[1u8; 2000]);
    bytes.truncate(900);
    assert!(unpack(bytes, dest.path()).await.is_err());
}

#[tokio::test]
async fn strips_setuid_and_allows_inner_links() {
    let dest = tempfile::tempdir().unwrap();
    let mut setuid = raw_entry("tool", b'0', "", b"#!/bin/sh\n");
    setuid[100..107].copy_from_slice(b"0004755");
    let sum: u32 = {
        setuid[148..156].copy_from_slice(b"        ");
        setuid[..512].iter().map(|&b| u32::from(b)).sum()
    };
    setuid[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
    let entries = [
        setuid,
        raw_entry("d/", b'5', "", b""),
        raw_entry("d/link", b'2', "../tool", b""),
        raw_entry("hard", b'1', "tool", b""),
    ];
    unpack(archive(&entries), dest.path()).await.unwrap();
    let mode = std::fs::metadata(dest.path().join("tool"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o755);
    assert_eq!(
        std::fs::read_link(dest.path().join("d/link")).unwrap(),
        Path::new("../tool")
    );
    assert_eq!(
        std::fs::read(dest.path().join("hard")).unwrap(),
        b"#!/bin/sh\n"
    );
}

#[tokio::test]
async fn pack_round_trip_keeps_modes_links_empty_dirs_and_odd_names() {
    let src = tempfile::tempdir().unwrap();
    let s = src.path();
    std::fs::create_dir_all(s.join("empty/nested-empty")).unwrap();
    std::fs::create_dir_all(s.join("dir with space/ünïcødé")).unwrap();
    std::fs::write(s.join("dir with space/ünïcødé/file name.txt"), "odd").unwrap();
    std::fs::write(s.join("run.sh"), "#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(s.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    symlink("run.sh", s.join("link-to-run")).unwrap();
    let long = "l".repeat(150);
    std::fs::write(s.join(&long), "long name").unwrap();

    let dest = tempfile::tempdir().unwrap();
    let summary = unpack_untrusted(pack_dir(s), dest.path(), UnpackLimits::default())
        .await
        .unwrap();
    assert_eq!(summary.symlinks, 1);
    assert_eq!(tree(s), tree(dest.path()));
    let d = dest.path();
    let mode = std::fs::metadata(d.join("run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);
    assert_eq!(
        std::fs::read_link(d.join("link-to-run")).unwrap(),
        Path::new("run.sh")
    );
    assert!(d.join("empty/nested-empty").is_dir());
    assert_eq!(std::fs::read_to_string(d.join(&long)).unwrap(), "long name");
}

#[tokio::test]
async fn pack_of_missing_folder_fails_the_stream() {
    let mut sink = Vec::new();
    let err = tokio::io::copy(&mut pack_dir(Path::new("/nonexistent/x")), &mut sink)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("/nonexistent/x"), "{err}");
}

#[tokio::test]
async fn a_refusal_found_while_writing_skips_only_that_entry() {
    // The writer finds the link while the reader has far more queued than
    // the writer's queue holds: the refused entry is named, and every
    // entry after it still arrives.
    let mut entries = vec![
        raw_entry("sub/", b'5', "", b""),
        raw_entry("l", b'2', "sub", b""),
        raw_entry("l/x", b'0', "", b"x"),
    ];
    let big = vec![7u8; 1 << 20];
    entries.extend((0..64).map(|i| raw_entry(&format!("after{i}"), b'0', "", &big)));
    let outer = tempfile::tempdir().unwrap();
    let dest = outer.path().join("dest");
    let summary = unpack_untrusted(&archive(&entries)[..], &dest, UnpackLimits::default())
        .await
        .unwrap();
    assert_eq!(summary.refused.len(), 1);
    assert_eq!(summary.refused[0].path, "l/x");
    assert!(summary.refused[0].reason.contains("through symlink"));
    assert_eq!(summary.files, 64);
    assert!(!dest.join("sub/x").exists());
    assert_eq!(std::fs::read(dest.join("after63")).unwrap(), big);
}

#[tokio::test]
async fn a_link_chain_through_an_unpacked_link_is_refused() {
    // Each link is harmless as text; followed on disk, `d/up` is the
    // destination itself, so `d/up/..` is its parent: a host folder.
    assert_refused(
        &[
            raw_entry("d/", b'5', "", b""),
            raw_entry("d/up", b'2', "..", b""),
            raw_entry("passwd", b'2', "d/up/../etc/passwd", b""),
        ],
        "outside the destination",
    )
    .await;
    // The same chain built the other way round: the first link passes
    // through a path that is only later made a link.
    assert_refused(
        &[
            raw_entry("d/", b'5', "", b""),
            raw_entry("passwd", b'2', "d/up/../x", b""),
            raw_entry("d/up", b'2', "..", b""),
        ],
        "earlier link points through",
    )
    .await;
}

#[tokio::test]
async fn chains_of_links_inside_the_destination_are_kept() {
    let dest = tempfile::tempdir().unwrap();
    let entries = [
        raw_entry("lib.so", b'2', "lib.so.1", b""),
        raw_entry("lib.so.1", b'2', "lib.so.1.2", b""),
        raw_entry("lib.so.1.2", b'0', "", b"elf"),
        raw_entry("d/", b'5', "", b""),
        raw_entry("d/self", b'2', "../d", b""),
    ];
    let summary = unpack_untrusted(&archive(&entries)[..], dest.path(), UnpackLimits::default())
        .await
        .unwrap();
    assert!(summary.is_whole(), "{:?}", summary.refused);
    assert_eq!(std::fs::read(dest.path().join("lib.so")).unwrap(), b"elf");
}

/// A header with a declared size and no contents behind it: what a
/// hostile stream sends to make a reader allocate.
fn bomb_header(name: &str, kind: u8, size: u64) -> Vec<u8> {
    let mut h = raw_entry(name, kind, "", b"");
    h[124..135].copy_from_slice(format!("{size:011o}").as_bytes());
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h[..512].iter().map(|&b| u32::from(b)).sum();
    h[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
    h
}

#[tokio::test]
async fn extension_header_bombs_are_refused_before_they_are_read() {
    for (kind, name) in [
        (b'L', "GNU long name"),
        (b'K', "GNU long link"),
        (b'x', "PAX"),
    ] {
        let dest = tempfile::tempdir().unwrap();
        let bytes = archive(&[bomb_header("././@LongLink", kind, 600 << 20)]);
        let err = unpack_untrusted(&bytes[..], dest.path(), UnpackLimits::default())
            .await
            .unwrap_err();
        assert!(
            matches!(err, UnpackError::ExtensionTooLarge { size, .. } if size == 600 << 20),
            "{err}"
        );
        assert!(err.to_string().contains(name), "{err}");
    }
}

#[tokio::test]
async fn sparse_and_unknown_headers_are_refused() {
    for (kind, expect) in [(b'S', "sparse"), (b'Z', "unknown"), (b'X', "unknown")] {
        let dest = tempfile::tempdir().unwrap();
        let bytes = archive(&[bomb_header("f", kind, 1 << 32)]);
        let err = unpack_untrusted(&bytes[..], dest.path(), UnpackLimits::default())
            .await
            .unwrap_err();
        assert!(err.to_string().contains(expect), "{err}");
    }
}

#[tokio::test]
async fn long_names_within_the_cap_are_applied() {
    let long = format!("{}/{}/file", "d".repeat(150), "e".repeat(150));
    let mut name = long.clone().into_bytes();
    name.push(0);
    let entries = [
        raw_entry("././@LongLink", b'L', "", &name),
        raw_entry("short", b'0', "", b"data"),
    ];
    let dest = tempfile::tempdir().unwrap();
    unpack_untrusted(&archive(&entries)[..], dest.path(), UnpackLimits::default())
        .await
        .unwrap();
    assert_eq!(std::fs::read(dest.path().join(long)).unwrap(), b"data");
}

#[tokio::test]
async fn bytes_after_the_end_of_archive_count_and_are_read() {
    let mut bytes = archive(&[raw_entry("f", b'0', "", b"x")]);
    bytes.extend(std::iter::repeat_n(0u8, 8192));
    let dest = tempfile::tempdir().unwrap();
    let limits = UnpackLimits {
        max_bytes: 4096,
        ..UnpackLimits::default()
    };
    let err = unpack_untrusted(&bytes[..], dest.path(), limits)
        .await
        .unwrap_err();
    assert!(matches!(err, UnpackError::TooLarge { .. }), "{err}");
}

#[tokio::test]
async fn folders_a_path_implies_count_against_the_entry_cap() {
    let dest = tempfile::tempdir().unwrap();
    let bytes = archive(&[raw_entry("a/b/c/d/e/f/g/h", b'0', "", b"x")]);
    let limits = UnpackLimits {
        max_entries: 4,
        ..UnpackLimits::default()
    };
    let err = unpack_untrusted(&bytes[..], dest.path(), limits)
        .await
        .unwrap_err();
    assert!(
        matches!(err, UnpackError::TooManyEntries { limit: 4 }),
        "{err}"
    );
}

#[tokio::test]
async fn a_failed_pack_is_never_taken_for_a_whole_archive() {
    // A socket cannot be packed; the packer fails after the files before
    // it. The stream must end in that error, not in a clean end-of-archive
    // that makes the consumer think the checkout was whole.
    let src = tempfile::tempdir().unwrap();
    std::fs::write(src.path().join("a-first"), "before").unwrap();
    let _socket = std::os::unix::net::UnixListener::bind(src.path().join("b.sock")).unwrap();
    std::fs::write(src.path().join("c-after"), "after").unwrap();
    let dest = tempfile::tempdir().unwrap();
    let err = unpack_untrusted(pack_dir(src.path()), dest.path(), UnpackLimits::default())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("b.sock"), "{err}");
    assert!(err.to_string().contains("socket"), "{err}");
    // A plain reader of the stream sees no end-of-archive marker either.
    let mut bytes = Vec::new();
    let read = pack_dir(src.path()).read_to_end(&mut bytes).await;
    assert!(read.is_err());
    assert!(
        !bytes.ends_with(&[0u8; 1024]),
        "the failed stream was terminated"
    );
}

#[tokio::test]
async fn devices_and_fifos_are_skipped_and_the_rest_arrives() {
    let entries = [
        raw_entry("fifo", b'6', "", b""),
        raw_entry("dev", b'3', "", b""),
        raw_entry("report.txt", b'0', "", b"ok"),
    ];
    let dest = tempfile::tempdir().unwrap();
    let summary = unpack_untrusted(&archive(&entries)[..], dest.path(), UnpackLimits::default())
        .await
        .unwrap();
    assert_eq!(summary.refused_count, 2);
    assert_eq!(summary.refused[0].path, "fifo");
    assert_eq!(
        std::fs::read(dest.path().join("report.txt")).unwrap(),
        b"ok"
    );
}

#[tokio::test]
async fn many_small_files_and_a_large_one_arrive_whole() {
    let src = tempfile::tempdir().unwrap();
    for i in 0..2000 {
        let dir = src.path().join(format!("d{}", i / 100));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("f{i}")), format!("file {i}")).unwrap();
    }
    let large: Vec<u8> = (0..(3 << 20) + 17).map(|i| (i % 251) as u8).collect();
    std::fs::write(src.path().join("large.bin"), &large).unwrap();
    let dest = tempfile::tempdir().unwrap();
    let summary = unpack_untrusted(pack_dir(src.path()), dest.path(), UnpackLimits::default())
        .await
        .unwrap();
    assert_eq!(summary.files, 2001);
    assert_eq!(std::fs::read(dest.path().join("large.bin")).unwrap(), large);
    assert_eq!(
        std::fs::read_to_string(dest.path().join("d19/f1999")).unwrap(),
        "file 1999"
    );
}

#[tokio::test]
async fn pack_order_is_sorted_and_stable_across_small_and_streamed_files() {
    // Small files are read in batches and bigger ones streamed; the
    // archive must not show where one ends and the other begins.
    let src = tempfile::tempdir().unwrap();
    let s = src.path();
    let medium: Vec<u8> = (0..100_000).map(|i| (i % 253) as u8).collect();
    std::fs::write(s.join("a"), "small a").unwrap();
    std::fs::write(s.join("b"), &medium).unwrap();
    std::fs::write(s.join("c"), "small c").unwrap();
    symlink("c", s.join("d")).unwrap();
    std::fs::create_dir(s.join("e")).unwrap();
    std::fs::write(s.join("e/f"), "").unwrap();
    std::fs::write(s.join("g"), "small g").unwrap();

    let pack = || async {
        let mut bytes = Vec::new();
        pack_dir(s).read_to_end(&mut bytes).await.unwrap();
        bytes
    };
    let first = pack().await;
    assert_eq!(first, pack().await, "the same tree packs the same");

    let mut names = Vec::new();
    let mut entries = tokio_tar::Archive::new(first.as_slice()).entries().unwrap();
    while let Some(entry) = entries.next().await {
        let mut entry = entry.unwrap();
        let name = entry.path().unwrap().display().to_string();
        let mut data = Vec::new();
        entry.read_to_end(&mut data).await.unwrap();
        if name == "b" {
            assert_eq!(data, medium);
        }
        names.push(name);
    }
    assert_eq!(names, ["a", "b", "c", "d", "e", "g", "e/f"]);
}

/// A PAX header setting the next entry's path to `path` (any bytes).
fn pax_path(path: &[u8]) -> Vec<u8> {
    let body_len = " path=".len() + path.len() + 1;
    // The record's length counts its own digits.
    let mut len = body_len + 1;
    while len.to_string().len() + body_len != len {
        len += 1;
    }
    let mut record = format!("{len} path=").into_bytes();
    record.extend_from_slice(path);
    record.push(b'\n');
    raw_entry("pax", b'x', "", &record)
}

fn long_name(kind: u8, name: &str) -> Vec<u8> {
    let mut bytes = name.as_bytes().to_vec();
    bytes.push(0);
    raw_entry("././@LongLink", kind, "", &bytes)
}

#[tokio::test]
async fn names_the_host_cannot_hold_refuse_only_their_entry() {
    let deep = vec!["d".repeat(200); 25].join("/");
    let entries = [
        pax_path(b"nul\0inside"),
        raw_entry("placeholder", b'0', "", b"x"),
        long_name(b'L', &format!("{}/f", "n".repeat(300))),
        raw_entry("placeholder", b'0', "", b"x"),
        long_name(b'L', &format!("{deep}/f")),
        raw_entry("placeholder", b'0', "", b"x"),
        long_name(b'K', &"t/".repeat(2500)),
        raw_entry("long-target", b'2', "", b""),
        raw_entry("after", b'0', "", b"arrived"),
    ];
    let dest = tempfile::tempdir().unwrap();
    let summary = unpack_untrusted(&archive(&entries)[..], dest.path(), UnpackLimits::default())
        .await
        .unwrap();
    assert_eq!(summary.refused_count, 4, "{:?}", summary.refused);
    assert!(
        summary.refused[0].reason.contains("NUL"),
        "{:?}",
        summary.refused
    );
    assert_eq!(
        std::fs::read(dest.path().join("after")).unwrap(),
        b"arrived"
    );
}

#[tokio::test]
async fn a_hard_link_to_itself_keeps_the_file() {
    let entries = [
        raw_entry("f", b'0', "", b"kept"),
        raw_entry("f", b'1', "f", b""),
        raw_entry("after", b'0', "", b"arrived"),
    ];
    let dest = tempfile::tempdir().unwrap();
    let summary = unpack_untrusted(&archive(&entries)[..], dest.path(), UnpackLimits::default())
        .await
        .unwrap();
    assert_eq!(std::fs::read(dest.path().join("f")).unwrap(), b"kept");
    assert_eq!(summary.refused.len(), 1);
    assert!(summary.refused[0].reason.contains("itself"));
    assert!(dest.path().join("after").exists());
}
