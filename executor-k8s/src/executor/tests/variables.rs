//! A step's variables, and a Job whose pod cannot start

use super::*;

#[tokio::test]
async fn a_step_gets_exactly_its_variables_by_name_never_their_values() {
    let spec = RunSpec::new("r", "did:plc:r", ".", "out")
        .env("MODE", "release")
        .step(Step::new("s", "make").env("TOKEN_LIKE", "s3cr3t-value"))
        .step(Step::new("t", "test").env("OTHER", "o"));
    // The start goes as a message through the step channel.
    let started = Stdin::default();
    let seen = started.clone();
    let mut cluster = MockCluster::new();
    cluster
        .expect_exec()
        .times(1)
        .returning(move |_, _, _, _| Ok(scripted(true, "", Ended::Exited(0), &seen)));
    let executor = live_from(cluster, &spec);
    let env = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    // The driver's order: standard folders, run variables, step variables;
    // MODE is not asked for.
    let wanted = env(&[("WORK_DIR", "/work"), ("TOKEN_LIKE", "s3cr3t-value")]);
    run_step(&executor, wanted).await.unwrap();
    let line = String::from_utf8(started.lock().unwrap().clone()).unwrap();
    assert!(
        line.contains("export TOKEN_LIKE=\"$KNOTLESS_S0_TOKEN_LIKE\""),
        "{line}"
    );
    assert!(!line.contains("s3cr3t-value"), "{line}");
    let unset = line.split("unset ").nth(1).unwrap_or_default();
    for hidden in [
        "MODE",
        "STEPS_DIR",
        "KNOTLESS_S0_TOKEN_LIKE",
        "KNOTLESS_S1_OTHER",
    ] {
        assert!(unset.contains(hidden), "{hidden} stays: {line}");
    }
    assert!(!unset.contains("WORK_DIR "), "{line}");
}

#[tokio::test]
async fn a_step_variable_the_run_was_not_started_with_holding_a_secret_is_refused_before_any_exec()
{
    let spec = RunSpec::new("r", "did:plc:r", ".", "out")
        .secret("TOKEN", executor_core::Secret::new("v4lu3-x-secret"))
        .step(Step::new("s", "make"));
    let mut cluster = MockCluster::new();
    cluster.expect_exec().times(0);
    let executor = live_from(cluster, &spec);
    let err = run_step(
        &executor,
        vec![("NEW".into(), "Bearer v4lu3-x-secret".into())],
    )
    .await
    .unwrap_err();
    assert!(matches!(err, ExecutorError::InvalidInput(_)), "{err}");
    assert!(err.to_string().contains("StepCommand::env NEW"), "{err}");
    assert!(!err.to_string().contains("v4lu3-x"), "{err}");
}

/// A value known only as the step starts (an earlier step's output, the
/// runner's variables) that holds no secret travels in the start, quoted.
#[tokio::test]
async fn a_computed_value_without_a_secret_travels_in_the_start_quoted() {
    let spec = RunSpec::new("r", "did:plc:r", ".", "out").step(Step::new("s", "make"));
    let started = Stdin::default();
    let seen = started.clone();
    let mut cluster = MockCluster::new();
    cluster
        .expect_exec()
        .times(1)
        .returning(move |_, _, _, _| Ok(scripted(true, "", Ended::Exited(0), &seen)));
    let executor = live_from(cluster, &spec);
    run_step(&executor, vec![("OUT".into(), "it's $(x)".into())])
        .await
        .unwrap();
    let line = String::from_utf8(started.lock().unwrap().clone()).unwrap();
    let native = line
        .lines()
        .find_map(|l| l.strip_prefix("#knotless-native "))
        .map(|h| {
            let h = h.trim();
            let bytes: Vec<u8> = (0..h.len() / 2)
                .filter_map(|i| u8::from_str_radix(h.get(2 * i..2 * i + 2)?, 16).ok())
                .collect();
            String::from_utf8_lossy(&bytes).into_owned()
        })
        .unwrap_or_default();
    assert!(
        native.contains("export OUT='it'\\''s $(x)'; "),
        "{native:?}"
    );
}

#[tokio::test]
async fn a_job_whose_pod_cannot_start_is_torn_down_before_start_returns() {
    let mut cluster = MockCluster::new();
    cluster.expect_namespace().return_const("ns".to_string());
    cluster.expect_tls_unverified().return_const(false);
    cluster.expect_access_review().returning(|_| Ok(true));
    cluster
        .expect_create_job()
        .times(1)
        .returning(|job| Ok(job.clone()));
    let lists = AtomicUsize::new(0);
    cluster.expect_list_pods().returning(move |_| {
        if lists.fetch_add(1, Ordering::SeqCst) == 0 {
            let waiting = pod(
                json!({"metadata": {"name": "p"}, "status": {"phase": "Pending",
                "containerStatuses": [{"name": "step", "image": "i", "imageID": "", "ready": false,
                    "restartCount": 0, "state": {"waiting": {"reason": "ErrImagePull",
                        "message": "manifest unknown"}}}]}}),
            );
            Ok((vec![waiting], "1".into()))
        } else {
            // After the delete: the pod is gone.
            Ok((Vec::new(), "2".into()))
        }
    });
    cluster.expect_pod_events().returning(|_| Ok(Vec::new()));
    cluster.expect_delete_job().times(1).returning(|_| Ok(()));
    let executor = K8sExecutor::with_cluster(Arc::new(cluster), K8sOptions::default());
    let checkout = tempfile::tempdir().unwrap();
    let mut spec = RunSpec::new(
        "half",
        "did:plc:half",
        checkout.path(),
        checkout.path().join("out"),
    )
    .step(Step::new("s", "true"));
    spec.image = Some("registry.invalid/missing".into());
    let err = executor
        .start(&spec, &RunLog::discard(), CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), FailureKind::Image, "{err}");
    assert!(!err.retryable(), "a missing image will not appear: {err}");
    assert!(executor.live().is_empty());
}
