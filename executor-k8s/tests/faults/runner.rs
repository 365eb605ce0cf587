//! Secrets, a killed runner, bad credentials and a dry run against a real run

use super::*;

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn variables_go_through_a_secret_owned_by_the_job_and_never_into_the_log() {
    let backend = k8s().await;
    let fx = Fixture::new("secret");
    let spec = fx
        .spec(&backend, "secret")
        .env("API_TOKEN", "s3cr3t-run-value")
        .step(
            // The expected values are assembled at run time so that the
            // script itself, which does go into the exec URL, holds none.
            Step::new(
                "use",
                "p=s3cr3; [ \"$API_TOKEN\" = \"${p}t-run-value\" ] && [ \"$STEP_ONLY\" = \"${p}t-step-value\" ] && echo vars-arrived",
            )
            .env("STEP_ONLY", "s3cr3t-step-value"),
        );
    let log = WatchedLog::default();
    let inspect = async {
        log.wait_for("vars-arrived").await;
    };
    let (result, ()) = tokio::join!(
        run_watched(&backend, &spec, &log, CancellationToken::new()),
        inspect
    );
    assert_eq!(result.status, RunStatus::Success, "{}", log.text());
    assert!(
        !log.text().contains("s3cr3t"),
        "a secret value reached the log"
    );
    let requests = backend.cluster.requests();
    assert!(
        requests.iter().all(|r| !r.query.contains("s3cr3t")),
        "a secret value went into a URL"
    );
    // Nor into any body but the Secret's own: not the Job, not a patch.
    use base64::Engine as _;
    let values = ["s3cr3t-run-value", "s3cr3t-step-value"];
    let forms: Vec<String> = values
        .iter()
        .flat_map(|v| {
            [
                v.to_string(),
                base64::engine::general_purpose::STANDARD.encode(v),
            ]
        })
        .collect();
    let bodies = backend.cluster.bodies();
    assert!(
        bodies
            .iter()
            .any(|b| b.method == "POST" && b.path.ends_with("/jobs")),
        "the Job's body was recorded"
    );
    // The check can see a value: the Secret's own body holds them.
    assert!(
        bodies.iter().any(|b| forms
            .iter()
            .any(|f| String::from_utf8_lossy(&b.body).contains(f.as_str()))),
        "no body holds the values at all: {bodies:?}"
    );
    for body in &bodies {
        let text = String::from_utf8_lossy(&body.body);
        let secret_create = body.method == "POST" && body.path.ends_with("/secrets");
        for form in &forms {
            assert!(
                secret_create || !text.contains(form.as_str()),
                "{form} went into {} {}: {text}",
                body.method,
                body.path
            );
        }
    }
    assert!(
        requests
            .iter()
            .any(|r| r.method == "PATCH" && r.path.contains("/secrets/")),
        "the Secret was given to the Job"
    );
    assert!(backend.cluster.secrets("default").is_empty());
    assert_nothing_left(&backend, &fx.runner).await;
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_runners_job_is_removed_by_the_next_cleanup_and_no_other() {
    let backend = k8s().await;
    let fx = Fixture::new("crashed");
    let other = Fixture::new("bystander");
    let spec = fx.spec(&backend, "crashed").env("K", "v");
    let source = KubeconfigSource {
        kubeconfig: Some(backend.cluster.kubeconfig().to_path_buf()),
        ..Default::default()
    };
    // A runner that starts a run and dies before stopping it.
    let crashed = K8sExecutor::connect(&source, common::options())
        .await
        .unwrap();
    crashed
        .start(&spec, &RunLog::discard(), CancellationToken::new())
        .await
        .unwrap();
    drop(crashed);
    // Another runner's live run.
    let other_spec = other.spec(&backend, "bystander");
    let other_handle = backend
        .executor
        .start(&other_spec, &RunLog::discard(), CancellationToken::new())
        .await
        .unwrap();

    let next = K8sExecutor::connect(&source, common::options())
        .await
        .unwrap();
    assert!(
        next.cleanup(&fx.runner, CleanupScope::Expired)
            .await
            .unwrap()
            .removed
            .is_empty(),
        "not expired yet"
    );
    let report = next.cleanup(&fx.runner, CleanupScope::All).await.unwrap();
    assert_eq!(report.removed.len(), 1, "{report:?}");
    assert!(next.leftovers(&fx.runner).await.unwrap().is_empty());
    assert!(
        !next.leftovers(&other.runner).await.unwrap().is_empty(),
        "another runner's run was touched"
    );
    backend.executor.stop(&other_handle).await.unwrap();
    assert!(backend
        .executor
        .leftovers(&other.runner)
        .await
        .unwrap()
        .is_empty());
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_credentials_and_unreachable_servers_are_clear_errors() {
    let cluster = kube_testcluster::TestCluster::start(ClusterOptions::default())
        .await
        .unwrap();
    for auth in [KubeconfigAuth::StrangerCert, KubeconfigAuth::BadToken] {
        let source = KubeconfigSource {
            kubeconfig: Some(cluster.kubeconfig_with(auth).unwrap()),
            ..Default::default()
        };
        let err = K8sExecutor::connect(&source, common::options())
            .await
            .err()
            .expect("refused");
        let msg = err.to_string();
        assert!(msg.contains(cluster.url()), "{auth:?}: {msg}");
    }
    let url = cluster.url().to_string();
    let kubeconfig = cluster.kubeconfig().to_path_buf();
    let text = std::fs::read_to_string(&kubeconfig).unwrap();
    cluster.shutdown().await;
    let dir = tempfile::tempdir().unwrap();
    let gone = dir.path().join("kubeconfig-gone");
    std::fs::write(&gone, text).unwrap();
    let source = KubeconfigSource {
        kubeconfig: Some(gone),
        ..Default::default()
    };
    let err = K8sExecutor::connect(&source, common::options())
        .await
        .err()
        .expect("unreachable");
    assert!(
        err.to_string().contains(&url) && err.to_string().contains("did not answer"),
        "{err}"
    );
    assert_eq!(err.kind(), FailureKind::Unreachable);
    // The client's own error is kept under the words, for an embedder.
    let cause = std::error::Error::source(&err).map(|s| s.to_string());
    assert!(cause.is_some(), "{err:?}");
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_run_makes_the_calls_its_dry_run_printed() {
    let backend = k8s().await;
    let fx = Fixture::new("dryrun");
    std::fs::write(fx.checkout().join("f"), "x").unwrap();
    let spec = fx
        .spec(&backend, "dry-run")
        .env("TOKEN", "never-printed")
        .step(Step::new("one", "echo one > \"$OUTPUTS_DIR/one.txt\""))
        .step(Step::new("two", "true"));
    // The dry-run. It cannot know the cluster's exec protocol; it assumes v5.
    let printed = SharedBuf::default();
    let dry = K8sExecutor::dry_run("default", common::options(), printed.clone());
    let dry_result =
        executor_core::run(&dry, &spec, &RunLog::discard(), CancellationToken::new()).await;
    assert_eq!(dry_result.status, RunStatus::Success);
    let text = printed.text();
    assert!(
        text.contains("kind: Job") && text.contains("backoffLimit: 0"),
        "{text}"
    );
    assert!(
        !text.contains("never-printed"),
        "a secret value was printed"
    );

    backend.cluster.clear_requests();
    let (result, log) = run_to_end(&backend, &spec).await;
    assert_eq!(
        result.status,
        RunStatus::Success,
        "{}\n{}",
        result.to_json(),
        log.text()
    );
    let normalize = |path: &str| {
        // Names differ between the two runs: the Job's random suffix and the pod's.
        let mut out = Vec::new();
        for part in path.split('/') {
            out.push(if part.starts_with("knotless-dry-run-") {
                "NAME"
            } else {
                part
            });
        }
        out.join("/")
    };
    let expected: Vec<(String, String)> = executor_k8s::dry_run_calls(&text)
        .into_iter()
        .map(|(m, p)| (m, normalize(&p)))
        .collect();
    let mut actual: Vec<(String, String)> = backend
        .cluster
        .requests()
        .into_iter()
        .filter(|r| r.path != "/version")
        // Events are read only while the pod is still coming, which depends
        // on how fast it got Ready; they are reports, never changes.
        .filter(|r| !(r.method == "GET" && r.path.ends_with("/events")))
        .map(|r| (r.method, normalize(&r.path)))
        .collect();
    // The one-time protocol probe of a fresh executor is a call the dry-run also prints.
    actual.dedup_by(|a, b| a == b && a.1.ends_with("/pods") && a.0 == "GET");
    let mut expected_dedup = expected.clone();
    expected_dedup.dedup_by(|a, b| a == b && a.1.ends_with("/pods") && a.0 == "GET");
    assert_eq!(actual, expected_dedup, "\ndry-run printed:\n{text}");
    assert_nothing_left(&backend, &fx.runner).await;
}
