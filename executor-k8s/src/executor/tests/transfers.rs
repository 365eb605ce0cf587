//! The checkout on v4 and v5, and compressed copies

use super::*;

/// On v4 every copy goes in frames; the first, sent before the protocol
/// is known, says so in its first line: one exec, none dropped unsent.
#[tokio::test]
async fn on_v4_the_checkout_goes_in_frames_from_the_first_exec() {
    let mut cluster = MockCluster::new();
    let framed_stdin = Stdin::default();
    let argvs = Arc::new(Mutex::new(Vec::<Vec<String>>::new()));
    let (seen, frames) = (argvs.clone(), framed_stdin.clone());
    cluster.expect_exec().returning(move |_, _, argv, stdin| {
        if !stdin {
            // The folder is made first.
            assert_eq!(argv[0], "mkdir");
            return Ok(scripted(false, "", Ended::Exited(0), &Stdin::default()));
        }
        seen.lock().unwrap().push(argv.to_vec());
        Ok(scripted(false, "", Ended::Exited(0), &frames))
    });
    let executor = live(cluster);
    let checkout = tempfile::tempdir().unwrap();
    std::fs::write(checkout.path().join("f"), "x".repeat(100_000)).unwrap();
    let run = RunHandle::in_container("job");
    for _ in 0..2 {
        executor
            .copy_in(&run, checkout.path(), "/cache")
            .await
            .unwrap();
    }
    let argvs = argvs.lock().unwrap().clone();
    let scripts: Vec<_> = argvs
        .iter()
        .map(|a| (a[0].as_str(), a[2].as_str()))
        .collect();
    assert_eq!(
        scripts,
        [
            ("sh", crate::framed::PLAIN_OR_FRAMED),
            ("sh", crate::framed::UNFRAME)
        ],
        "{argvs:?}"
    );
    assert!(argvs
        .iter()
        .all(|a| a[4..] == ["tar", "x", "-o", "-C", "/cache"]));
    // The first says it comes framed; each ends with its end mark: the
    // archive's zero blocks, then the `0` line.
    let stdin = framed_stdin.lock().unwrap();
    let first_frame = stdin.strip_prefix(b"framed\n").expect("the first line");
    let length = first_frame.iter().position(|&b| b == b'\n').unwrap();
    let length: usize = std::str::from_utf8(&first_frame[..length])
        .unwrap()
        .parse()
        .unwrap();
    assert!(length > 100_000, "a frame of the archive: {length}");
    let ends = stdin.windows(3).filter(|w| w == b"\x000\n").count();
    assert_eq!(ends, 2, "two framed copies, each ended");
}

#[tokio::test]
async fn on_v5_stdin_is_closed_and_tar_runs_once() {
    let mut cluster = MockCluster::new();
    let tar_stdin = Stdin::default();
    let argvs = Arc::new(Mutex::new(Vec::<Vec<String>>::new()));
    let (given, seen) = (tar_stdin.clone(), argvs.clone());
    cluster.expect_exec().returning(move |_, _, argv, stdin| {
        if stdin {
            seen.lock().unwrap().push(argv.to_vec());
        }
        Ok(scripted(true, "", Ended::Exited(0), &given))
    });
    let executor = live(cluster);
    let checkout = tempfile::tempdir().unwrap();
    std::fs::write(checkout.path().join("f"), "data").unwrap();
    for _ in 0..2 {
        executor
            .copy_in(&RunHandle::in_container("job"), checkout.path(), "/cache")
            .await
            .unwrap();
    }
    let argvs = argvs.lock().unwrap().clone();
    // The first says it comes plain; the next is `tar x` alone.
    assert_eq!(argvs.len(), 2, "{argvs:?}");
    assert_eq!(argvs[0][..3], ["sh", "-c", crate::framed::PLAIN_OR_FRAMED]);
    assert_eq!(argvs[1], ["tar", "x", "-o", "-C", "/cache"]);
    // The plain archives, each read to its end (which the session closes
    // on v5), the first after its line.
    let stdin = tar_stdin.lock().unwrap();
    let archives = &stdin[b"plain\n".len()..];
    assert!(stdin.starts_with(b"plain\n"));
    assert!(
        archives.len() >= 2048 && archives.len() % 512 == 0,
        "{}",
        archives.len()
    );
}

/// Copies in with `Compression::Always`: where the image has gzip the
/// archive goes gzip-compressed into `gzip -dc | tar x`; where it has
/// none, as it is into `tar x`. gzip is asked for once per pod.
#[tokio::test]
async fn compressed_copies_go_through_gzip_where_the_image_has_it_and_plain_where_not() {
    for has_gzip in [true, false] {
        let mut cluster = MockCluster::new();
        let tar_stdin = Stdin::default();
        let given = tar_stdin.clone();
        let unpacks = Arc::new(Mutex::new(Vec::new()));
        let unpacked = unpacks.clone();
        cluster.expect_exec().returning(move |_, _, argv, stdin| {
            assert!(stdin, "no exec of its own asks for gzip: {argv:?}");
            unpacked.lock().unwrap().push(argv.to_vec());
            let probing = argv.iter().any(|a| a.contains("command -v gzip"));
            if probing && !has_gzip {
                return Ok(scripted(true, "", Ended::Exited(97), &Stdin::default()));
            }
            Ok(scripted(true, "", Ended::Exited(0), &given))
        });
        let executor = K8sExecutor::with_cluster(
            Arc::new(cluster),
            K8sOptions {
                compression: executor_core::tar::Compression::Always,
                ..K8sOptions::default()
            },
        );
        let checkout = tempfile::tempdir().unwrap();
        std::fs::write(checkout.path().join("f"), "data ".repeat(10_000)).unwrap();
        for _ in 0..2 {
            executor
                .stream_in("p", checkout.path(), "/cache")
                .await
                .unwrap();
        }
        let unpacks = unpacks.lock().unwrap();
        let stdin = tar_stdin.lock().unwrap();
        let plain_gzip = r#"gzip -dc | tar x -o -C "$0""#;
        // The first, sent before the protocol is known, in the line's
        // wrapper (`sh -c PLAIN_OR_FRAMED sh` in front).
        assert!(
            unpacks[0][6].starts_with("command -v gzip") && unpacks[0][6].ends_with(plain_gzip),
            "the first copy looks for gzip itself: {unpacks:?}"
        );
        if has_gzip {
            assert_eq!(unpacks.len(), 2, "{unpacks:?}");
            assert_eq!(unpacks[1][2], plain_gzip, "gzip is looked for once");
            assert_eq!(
                &stdin[..8],
                b"plain\n\x1f\x8b",
                "a gzip stream after the line"
            );
            assert!(stdin.len() < 2 * 10_000, "{}", stdin.len());
        } else {
            assert_eq!(unpacks.len(), 3, "the first copy again, plain: {unpacks:?}");
            for plain in &unpacks[1..] {
                assert_eq!(plain[..2], ["tar".to_string(), "x".to_string()]);
            }
            assert!(
                stdin.len() >= 2 * 50_000 && stdin.len() % 512 == 0,
                "{}",
                stdin.len()
            );
        }
    }
}
