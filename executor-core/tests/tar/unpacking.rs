//! What arrives from an archive the unpacker accepts in part or whole

use super::*;

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
