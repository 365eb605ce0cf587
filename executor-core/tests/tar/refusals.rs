//! Hostile archives and what the unpacker refuses

use super::*;

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
