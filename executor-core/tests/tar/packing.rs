//! Packing a folder, round trips and a pack that fails

use super::*;

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
