//! The checkout on v4 and v5, and compressed copies

use super::*;

#[tokio::test]
async fn on_v4_the_checkout_goes_in_frames_once_the_protocol_is_known() {
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
        // The first, plain `tar x`, learns that the server speaks v4 and
        // is dropped unsent; every copy after goes framed.
        let stdin = if argv[0] == "sh" {
            &frames
        } else {
            &Stdin::default()
        };
        Ok(scripted(false, "", Ended::Exited(0), stdin))
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
    let framed: Vec<_> = argvs
        .iter()
        .filter(|a| a[0] == "sh" && a[2] == crate::framed::UNFRAME)
        .collect();
    let plain: Vec<_> = argvs.iter().filter(|a| a[0] == "tar").collect();
    assert_eq!((plain.len(), framed.len()), (1, 2), "{argvs:?}");
    // Each framed copy ends with its end mark: the archive's zero blocks,
    // then the `0` line.
    let stdin = framed_stdin.lock().unwrap();
    assert!(
        stdin.ends_with(b"\x000\n"),
        "{:?}",
        &stdin[stdin.len().saturating_sub(8)..]
    );
}

#[tokio::test]
async fn on_v5_stdin_is_closed_and_tar_runs_once() {
    let mut cluster = MockCluster::new();
    let tar_stdin = Stdin::default();
    let (given, tars) = (tar_stdin.clone(), Arc::new(AtomicUsize::new(0)));
    let counted = tars.clone();
    cluster.expect_exec().returning(move |_, _, argv, stdin| {
        assert!(!stdin || argv[0] == "tar", "{argv:?}");
        if stdin {
            counted.fetch_add(1, Ordering::SeqCst);
        }
        Ok(scripted(true, "", Ended::Exited(0), &given))
    });
    let executor = live(cluster);
    let checkout = tempfile::tempdir().unwrap();
    std::fs::write(checkout.path().join("f"), "data").unwrap();
    executor
        .copy_in(&RunHandle::in_container("job"), checkout.path(), "/cache")
        .await
        .unwrap();
    assert_eq!(tars.load(Ordering::SeqCst), 1);
    // The plain archive, read to its end (which the session closes on v5).
    let stdin = tar_stdin.lock().unwrap();
    assert!(
        stdin.len() >= 1024 && stdin.len() % 512 == 0,
        "{}",
        stdin.len()
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
            let probing = argv.get(2).is_some_and(|a| a.contains("command -v gzip"));
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
        assert!(
            unpacks[0][2].starts_with("command -v gzip") && unpacks[0][2].ends_with(plain_gzip),
            "the first copy looks for gzip itself: {unpacks:?}"
        );
        if has_gzip {
            assert_eq!(unpacks.len(), 2, "{unpacks:?}");
            assert_eq!(unpacks[1][2], plain_gzip, "gzip is looked for once");
            assert_eq!(&stdin[..2], &[0x1f, 0x8b], "a gzip stream");
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
