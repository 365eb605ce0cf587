//! Every fault the test cluster can inject, a killed runner, bad
//! credentials, and the dry-run against a real run.

mod common;

use std::time::Duration;

use common::K8s;
use executor_conformance::fixture::SharedBuf;
use executor_conformance::fixture::{
    assert_nothing_left, run_to_end, run_watched, Fixture, WatchedLog,
};
use executor_core::{CleanupScope, Executor, FailureKind, RunLog, RunStatus, Step, StepStatus};
use executor_k8s::{K8sExecutor, K8sOptions, KubeconfigSource};
use kube_testcluster::{ClusterOptions, ImagePullFault, KubeconfigAuth, PodFault};
use tokio_util::sync::CancellationToken;

async fn k8s() -> K8s {
    K8s::start(ClusterOptions::default(), common::options()).await
}

fn error_of(result: &executor_core::RunResult) -> String {
    result.error.clone().unwrap_or_default()
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_pending_pod_is_waited_for_with_progress() {
    let backend = K8s::start(
        ClusterOptions::default(),
        K8sOptions {
            progress_every: Duration::from_millis(300),
            ..common::options()
        },
    )
    .await;
    backend.cluster.faults().pending_for(Duration::from_secs(2));
    let fx = Fixture::new("pending");
    let spec = fx
        .spec(&backend, "pending")
        .step(Step::new("hi", "echo scheduled-at-last"));
    let (result, log) = run_to_end(&backend, &spec).await;
    assert_eq!(result.status, RunStatus::Success, "{}", log.text());
    let text = log.text();
    assert!(text.contains("not scheduled: Unschedulable"), "{text}");
    assert!(text.contains("event Warning FailedScheduling"), "{text}");
    assert!(text.contains("TriggeredScaleUp"), "{text}");
    assert!(text.contains("(waited 0s)"), "{text}");
    // The periodic line, not only the first change of state.
    assert!(
        text.contains("still waiting for the pod to be ready after")
            && text.contains("not scheduled: Unschedulable"),
        "{text}"
    );
    assert_nothing_left(&backend, &fx.runner).await;
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unschedulable_pod_fails_at_the_pod_timeout() {
    let backend = K8s::start(
        ClusterOptions::default(),
        K8sOptions {
            pod_timeout: Duration::from_secs(3),
            ..common::options()
        },
    )
    .await;
    backend.cluster.faults().unschedulable(true);
    let fx = Fixture::new("unschedulable");
    let spec = fx
        .spec(&backend, "unschedulable")
        .step(Step::new("never", "true"));
    let (result, _) = run_to_end(&backend, &spec).await;
    assert_eq!(result.status, RunStatus::Error);
    let error = error_of(&result);
    assert!(
        error.contains("pod timeout of 3s") && error.contains("Unschedulable"),
        "{error}"
    );
    let failure = result.failure.unwrap();
    assert_eq!(failure.kind, FailureKind::Unschedulable);
    assert!(!failure.retryable);
    assert_nothing_left(&backend, &fx.runner).await;
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_pull_failures_fail_fast_with_the_reason() {
    for (fault, image, reason) in [
        // ErrImagePull turns into ImagePullBackOff: either may be seen first.
        (Some(ImagePullFault::BackOff), None, "ImagePull"),
        (None, Some("knotless-no-such-image:nope"), "ImagePull"),
        (Some(ImagePullFault::InvalidName), None, "InvalidImageName"),
    ] {
        let backend = K8s::start(
            ClusterOptions::default(),
            K8sOptions {
                pod_timeout: Duration::from_secs(600),
                ..common::options()
            },
        )
        .await;
        backend.cluster.faults().image_pull(fault);
        let fx = Fixture::new("imagepull");
        let mut spec = fx
            .spec(&backend, "image-pull")
            .step(Step::new("never", "true"));
        if let Some(image) = image {
            spec.image = Some(image.into());
        }
        // Fails fast: on the pod's reason, never by waiting out the 600 s
        // pod timeout (`run_to_end` bounds the wait against a hang).
        let (result, _) = run_to_end(&backend, &spec).await;
        assert_eq!(result.status, RunStatus::Error);
        assert!(error_of(&result).contains(reason), "{}", error_of(&result));
        assert!(
            !error_of(&result).contains("pod timeout"),
            "{}",
            error_of(&result)
        );
        let failure = result.failure.unwrap();
        assert_eq!(failure.kind, FailureKind::Image);
        // Not found, or a name that cannot be parsed: no retry fixes either.
        assert!(!failure.retryable, "{}", failure.message);
        assert_nothing_left(&backend, &fx.runner).await;
    }
}

/// An OOM kill is the step's failure, of kind `oom`, whatever the exec said.
fn assert_oom(result: &executor_core::RunResult) {
    assert_eq!(result.status, RunStatus::Failed);
    assert_eq!(result.steps[0].status, StepStatus::Failed);
    let failure = result.failure.clone().unwrap();
    assert_eq!((failure.kind, failure.retryable), (FailureKind::Oom, false));
}

/// A step whose child the kernel OOM-killed in a pod that lived on (the
/// step, not the container's own process, is the OOM killer's choice),
/// and that exits with a code of its own, is an OOM failure: the pod's
/// memory counters say, as no pod status does. A kill an earlier step
/// survived is not a later step's.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oom_kill_in_a_pod_that_lives_on_is_the_steps_and_only_its() {
    let backend = K8s::start(
        ClusterOptions::default(),
        K8sOptions {
            memory_limit: Some("32Mi".into()),
            ..common::options()
        },
    )
    .await;
    let hog = r#"sh -c "x=\$(head -c 200000000 /dev/zero | tr '\0' a)""#;
    let fx = Fixture::new("k8s-oom-code");
    let spec = fx
        .spec(&backend, "oom-code")
        .step(Step::new("hog", format!("{hog} || exit 1")));
    let (result, log) = run_to_end(&backend, &spec).await;
    assert_eq!(result.steps[0].exit_code, Some(1), "{}", log.text());
    assert_oom(&result);
    assert!(
        error_of(&result)
            .contains("OOMKilled: the step ran out of memory (the container's limit of 32Mi)"),
        "{}",
        error_of(&result)
    );
    assert_nothing_left(&backend, &fx.runner).await;

    let fx = Fixture::new("k8s-oom-earlier");
    let spec = fx
        .spec(&backend, "oom-earlier")
        .step(Step::new("survive", format!("{hog} || echo survived")))
        .step(Step::new("fail", "exit 3"));
    let (result, log) = run_to_end(&backend, &spec).await;
    let text = log.text();
    assert!(text.contains("survived"), "{text}");
    assert_eq!(result.steps[1].exit_code, Some(3), "{text}");
    let failure = result.failure.clone().unwrap();
    assert_eq!(failure.kind, FailureKind::Step, "{}", failure.message);
    assert_eq!(failure.step.as_deref(), Some("fail"));
    assert_nothing_left(&backend, &fx.runner).await;
    backend.cluster.shutdown().await;
}

/// An environment lost under the step is an error of `kind`, retryable.
fn assert_lost(result: &executor_core::RunResult, kind: FailureKind) {
    assert_eq!(result.status, RunStatus::Error);
    assert_eq!(result.steps[0].status, StepStatus::Error);
    let failure = result.failure.clone().unwrap();
    assert_eq!((failure.kind, failure.retryable), (kind, true));
}

/// Runs a step that announces itself, applies `fault` to the pod then,
/// and returns the result.
async fn fault_mid_step(fault: PodFault) -> (executor_core::RunResult, String) {
    fault_mid_step_on(k8s().await, fault).await
}

async fn fault_mid_step_on(backend: K8s, fault: PodFault) -> (executor_core::RunResult, String) {
    let fx = Fixture::new("midstep");
    let spec = fx
        .spec(&backend, "mid-step")
        .step(Step::new("victim", "echo victim-running; exec sleep 600"))
        .step(Step::new("after", "true"));
    let log = WatchedLog::default();
    let strike = async {
        log.wait_for("victim-running").await;
        let pod = backend.cluster.pods("default").pop().unwrap();
        backend.cluster.pod_fault("default", &pod, fault).await;
    };
    let (result, ()) = tokio::join!(
        run_watched(&backend, &spec, &log, CancellationToken::new()),
        strike
    );
    assert_nothing_left(&backend, &fx.runner).await;
    let step_error = result.steps[0].error.clone().unwrap_or_default();
    assert_eq!(
        result.steps[1].status,
        StepStatus::Skipped,
        "{}",
        log.text()
    );
    let failure = result.failure.clone().unwrap();
    assert_eq!(failure.step.as_deref(), Some("victim"));
    assert_eq!(result.steps[0].failure.as_ref(), Some(&failure));
    (result, step_error)
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_oom_killed_mid_step_ends_the_step_with_the_reason() {
    let (result, error) = fault_mid_step(PodFault::OomKill).await;
    assert_oom(&result);
    assert!(error.contains("OOMKilled"), "{error}");
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oom_kill_the_pod_status_reports_late_still_ends_the_step_with_the_reason() {
    let backend = k8s().await;
    backend.cluster.faults().status_lag(true);
    let (result, error) = fault_mid_step_on(backend, PodFault::OomKill).await;
    assert_oom(&result);
    assert!(error.contains("OOMKilled"), "{error}");
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_evicted_mid_step_ends_the_step_with_the_reason() {
    let (result, error) = fault_mid_step(PodFault::Evict).await;
    assert!(error.contains("evicted"), "{error}");
    assert_lost(&result, FailureKind::Evicted);
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_deleted_mid_step_ends_the_step_with_the_reason() {
    let (result, error) = fault_mid_step(PodFault::Delete).await;
    assert!(error.contains("was deleted"), "{error}");
    assert_lost(&result, FailureKind::EnvironmentLost);
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_step_whose_supervisor_is_gone_is_a_lost_status_never_success() {
    let backend = k8s().await;
    let fx = Fixture::new("cut");
    let spec = fx
        .spec(&backend, "cut")
        .step(Step::new("cut", "echo first-words; exec sleep 600"));
    // Start, then cut only the step's exec.
    let handle = backend
        .executor
        .start(&spec, &RunLog::discard(), CancellationToken::new())
        .await
        .unwrap();
    backend.cluster.faults().cut_next_exec();
    let command = executor_core::StepCommand {
        id: executor_core::labels::random_hex(8),
        follow_from: None,
        upcoming: Vec::new(),
        name: "cut".into(),
        script: spec.steps[0].script.clone(),
        env: handle.standard_env(),
    };
    let log = WatchedLog::default();
    let run_log = log.run_log();
    let stepping = backend
        .executor
        .command(&handle, &command, &run_log, CancellationToken::new());
    // Once the runner follows the cut step, its supervisor dies (as an
    // OOM kill of it would): no status will ever come.
    let kill = async {
        log.wait_for("the step's stream broke").await;
        backend
            .in_the_pod(&["sh", "-c", "kill -9 $(cat /.knotless/stepio-*.pid)"])
            .await;
    };
    let (err, ()) = tokio::join!(stepping, kill);
    let err = err.unwrap_err();
    assert!(
        matches!(err, executor_core::ExecutorError::LostExitStatus { .. }),
        "{err}"
    );
    assert_eq!(err.kind(), FailureKind::Unreachable);
    backend.executor.stop(&handle).await.unwrap();
    assert_nothing_left(&backend, &fx.runner).await;
}

/// A front that drops silent connections, with no keepalive to hold
/// them: the silent step's exec is cut, and so is each follow of it while
/// it stays silent; the step still ends with its own code and output.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_step_cut_by_an_idle_front_is_followed_to_its_end() {
    let backend = K8s::start(
        ClusterOptions::default(),
        K8sOptions {
            keepalive: Duration::from_secs(600),
            ..common::options()
        },
    )
    .await;
    backend
        .cluster
        .faults()
        .idle_websocket_timeout(Some(Duration::from_secs(3)));
    let fx = Fixture::new("idle");
    let spec = fx.spec(&backend, "idle").step(Step::new(
        "quiet",
        "echo going-quiet; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo still-here; exit 4",
    ));
    let log = WatchedLog::default();
    let release = async {
        // The step's exec and the first follow of it were both cut idle.
        log.wait_for("(cut 2)").await;
        backend.in_the_pod(&["touch", "/tmp/go"]).await;
    };
    let (result, ()) = tokio::join!(
        run_watched(&backend, &spec, &log, CancellationToken::new()),
        release
    );
    assert_eq!(result.steps[0].exit_code, Some(4), "{}", log.text());
    assert_eq!(result.steps[0].status, StepStatus::Failed, "{}", log.text());
    assert_eq!(
        log.text().matches("going-quiet").count(),
        1,
        "{}",
        log.text()
    );
    assert!(log.text().contains("still-here"), "{}", log.text());
    assert!(backend.cluster.faults().idle_cuts() >= 2);
    assert_nothing_left(&backend, &fx.runner).await;
}

/// A step silent for longer than a front's idle timeout keeps its exec:
/// the executor's pings hold the connection. The step stays silent until
/// the server has seen its exec pinged past the idle timeout (three pings
/// at a 1 s keepalive against a 2 s timeout), then is let go: the proof is
/// the pings and no idle cut, not how long anything took.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_silent_step_survives_an_idle_connection_timeout() {
    let backend = k8s().await;
    backend
        .cluster
        .faults()
        .idle_websocket_timeout(Some(Duration::from_secs(2)));
    let fx = Fixture::new("silent");
    let spec = fx.spec(&backend, "silent").step(Step::new(
        "quiet",
        "echo going-quiet; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo still-here",
    ));
    let log = WatchedLog::default();
    let release = async {
        log.wait_for("going-quiet").await;
        let mut pings = backend.cluster.faults().exec_pings();
        let from = *pings.borrow_and_update();
        let pinged = async {
            while *pings.borrow_and_update() < from + 3 {
                pings.changed().await.unwrap();
            }
        };
        // A guard against a hang, not a timing assertion.
        tokio::time::timeout(executor_conformance::fixture::PATIENCE, pinged)
            .await
            .expect("the silent exec was never pinged three times");
        backend.in_the_pod(&["touch", "/tmp/go"]).await;
    };
    let (result, ()) = tokio::join!(
        run_watched(&backend, &spec, &log, CancellationToken::new()),
        release
    );
    assert_eq!(result.status, RunStatus::Success, "{}", log.text());
    assert!(log.text().contains("still-here"));
    assert_eq!(backend.cluster.faults().idle_cuts(), 0);
    assert_nothing_left(&backend, &fx.runner).await;
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_are_retried_and_a_create_that_keeps_failing_is_a_clear_error() {
    let backend = K8s::start(
        ClusterOptions::default(),
        K8sOptions {
            reconnect_timeout: Duration::from_secs(2),
            ..common::options()
        },
    )
    .await;
    let fx = Fixture::new("retry");
    backend
        .cluster
        .faults()
        .fail_requests("GET", "/pods", 500, 2);
    backend
        .cluster
        .faults()
        .fail_requests("GET", "/pods", 429, 1);
    let spec = fx
        .spec(&backend, "retry")
        .step(Step::new("ok", "echo retried-fine"));
    let (result, log) = run_to_end(&backend, &spec).await;
    assert_eq!(result.status, RunStatus::Success, "{}", log.text());

    // A create is tried again too: the Job's name is the run's own, so a
    // conflict would be the first try, done though its answer was lost.
    backend
        .cluster
        .faults()
        .fail_requests("POST", "/jobs", 500, 1);
    let (result, log) = run_to_end(&backend, &spec).await;
    assert_eq!(result.status, RunStatus::Success, "{}", log.text());

    // One that keeps failing past K8sOptions::reconnect_timeout is an error.
    backend
        .cluster
        .faults()
        .fail_requests("POST", "/jobs", 500, 10_000);
    let (result, _) = run_to_end(&backend, &spec).await;
    assert_eq!(result.status, RunStatus::Error);
    let error = error_of(&result);
    assert!(
        error.contains("creating the run's Job") && error.contains("HTTP 500"),
        "{error}"
    );
    let failure = result.failure.unwrap();
    assert_eq!(
        failure.kind,
        FailureKind::Unreachable,
        "a 500 may pass next time"
    );
    assert!(failure.retryable);
    assert_nothing_left(&backend, &fx.runner).await;
}

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

/// A header that declares `size` bytes of GNU long name and brings none:
/// what a step's own `tar` sends to make the runner allocate.
fn long_name_bomb(size: u64) -> Vec<u8> {
    let mut h = [0u8; 512];
    h[..13].copy_from_slice(b"././@LongLink");
    h[100..107].copy_from_slice(b"0000644");
    h[124..135].copy_from_slice(format!("{size:011o}").as_bytes());
    h[136..147].copy_from_slice(b"00000000000");
    h[156] = b'L';
    h[257..263].copy_from_slice(b"ustar ");
    h[263..265].copy_from_slice(b" \0");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    h[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
    h.to_vec()
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_that_replaces_tar_cannot_bomb_or_flood_the_runner() {
    // On Kubernetes the `tar` that packs /outputs is the step's to replace.
    for (name, fake, expect) in [
        (
            "bomb",
            "cat /work/bomb.tar; head -c 1048576 /dev/zero",
            "GNU long name header declares 629145600 bytes",
        ),
        (
            "flood",
            "head -c 10000000 /dev/zero | tr '\\0' x >&2; printf '\\033[2J' >&2; exit 1",
            "more bytes)",
        ),
    ] {
        // Uncompressed, so `tar` is the step's to replace: compressed, the
        // copy runs `sh -c 'tar c | gzip'`, and busybox's sh runs its own
        // tar applet, never the step's file (compression is on when the
        // connect-time round trip, slower under load, says so).
        let backend = K8s::start(
            ClusterOptions::default(),
            K8sOptions {
                compression: executor_core::tar::Compression::Never,
                ..common::options()
            },
        )
        .await;
        let fx = Fixture::new(name);
        std::fs::write(fx.checkout().join("bomb.tar"), long_name_bomb(600 << 20)).unwrap();
        let replace =
            "rm -f /bin/tar && printf '#!/bin/sh\\n%s\\n' \"$FAKE\" > /bin/tar && chmod +x /bin/tar";
        let spec = fx
            .spec(&backend, name)
            .step(Step::new("replace-tar", replace).env("FAKE", fake));
        let (result, log) = run_to_end(&backend, &spec).await;
        assert_eq!(result.status, RunStatus::Error, "{}", log.text());
        let error = error_of(&result);
        assert!(error.contains(expect), "{name}: {error}");
        // The flood is cut to its first few KiB and has no escape codes.
        assert!(error.len() < 6000, "{name}: {} bytes of error", error.len());
        assert!(!error.contains('\u{1b}'), "{name}: {error}");
        assert!(!log.text().contains('\u{1b}'), "{name}");
        assert_nothing_left(&backend, &fx.runner).await;
    }
}

/// Watches that the server ends early (as real servers do after their
/// request timeout) are listed again and watched on: the pod wait and the
/// wait for the pod to go both ride through them.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_the_server_ends_are_listed_again_and_watched_on() {
    let backend = k8s().await;
    backend
        .cluster
        .faults()
        .watch_expiry(Some(Duration::from_millis(200)));
    backend.cluster.faults().pending_for(Duration::from_secs(1));
    let fx = Fixture::new("watchexpiry");
    let spec = fx
        .spec(&backend, "watch-expiry")
        .step(Step::new("hi", "echo through-expired-watches"));
    let (result, log) = run_to_end(&backend, &spec).await;
    assert_eq!(result.status, RunStatus::Success, "{}", log.text());
    assert!(log.text().contains("through-expired-watches"));
    let (expired, _) = backend.cluster.faults().watch_endings();
    assert!(expired >= 1, "no watch expired: the re-list path never ran");
    assert_nothing_left(&backend, &fx.runner).await;
}

/// The scheduling inputs the executor sets are the scheduler's to honour:
/// a node selector the node does not match, or a taint the pod does not
/// tolerate, leaves the pod Pending until the pod timeout (`unschedulable`);
/// the toleration lets it run.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_selectors_and_taints_decide_where_the_pod_may_run() {
    let start = |options: K8sOptions| async move {
        K8s::start(
            ClusterOptions::default(),
            K8sOptions {
                pod_timeout: Duration::from_secs(3),
                ..options
            },
        )
        .await
    };
    let expect_unschedulable = |result: &executor_core::RunResult, why: &str| {
        let failure = result.failure.clone().unwrap();
        assert_eq!(
            failure.kind,
            FailureKind::Unschedulable,
            "{}",
            failure.message
        );
        assert!(failure.message.contains(why), "{}", failure.message);
    };

    let backend = start(K8sOptions {
        node_selector: vec![("pool".into(), "gpu".into())],
        ..common::options()
    })
    .await;
    let fx = Fixture::new("selector");
    let spec = fx.spec(&backend, "selector").step(Step::new("s", "true"));
    let (result, _) = run_to_end(&backend, &spec).await;
    expect_unschedulable(&result, "didn't match Pod's node affinity/selector");
    assert_nothing_left(&backend, &fx.runner).await;

    let tainted = |options: K8sOptions| async move {
        let backend = start(options).await;
        backend
            .cluster
            .faults()
            .taint_node("dedicated", "ci", "NoSchedule");
        backend
    };
    let backend = tainted(common::options()).await;
    let fx = Fixture::new("taint");
    let spec = fx.spec(&backend, "taint").step(Step::new("s", "true"));
    let (result, _) = run_to_end(&backend, &spec).await;
    expect_unschedulable(&result, "untolerated taint {dedicated: ci}");
    assert_nothing_left(&backend, &fx.runner).await;

    let backend = tainted(K8sOptions {
        tolerations: vec![serde_json::json!({
            "key": "dedicated", "operator": "Equal", "value": "ci", "effect": "NoSchedule"
        })],
        ..common::options()
    })
    .await;
    let fx = Fixture::new("tolerated");
    let spec = fx
        .spec(&backend, "tolerated")
        .step(Step::new("s", "echo ran-on-the-tainted-node"));
    let (result, log) = run_to_end(&backend, &spec).await;
    assert_eq!(result.status, RunStatus::Success, "{}", log.text());
    assert_nothing_left(&backend, &fx.runner).await;
}

/// `isolate` gives a run a node to itself: on a one-node cluster a second
/// isolated run waits Pending (pod anti-affinity) until the first one's pod
/// is gone, then runs.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_isolated_runs_on_one_node_take_turns() {
    let backend = K8s::start(
        ClusterOptions::default(),
        K8sOptions {
            isolate: true,
            ..common::options()
        },
    )
    .await;
    let (first, second) = (Fixture::new("isolated-a"), Fixture::new("isolated-b"));
    let first_spec = first.spec(&backend, "isolated-a").step(Step::new(
        "hold",
        // Holds the node until the second run is seen waiting for it.
        "echo holding-the-node; while [ ! -e /work/release ]; do sleep 0.05; done",
    ));
    let second_spec = second
        .spec(&backend, "isolated-b")
        .step(Step::new("after", "echo second-ran"));
    let (first_log, second_log) = (WatchedLog::default(), WatchedLog::default());
    let second_run = async {
        first_log.wait_for("holding-the-node").await;
        let result = run_watched(
            &backend,
            &second_spec,
            &second_log,
            CancellationToken::new(),
        )
        .await;
        (result, second_log.text())
    };
    let release = async {
        second_log
            .wait_for("didn't match pod anti-affinity rules")
            .await;
        // Let the first run end: its step waits for this file in its pod.
        let pods = backend.cluster.all_pods();
        let (ns, pod) = pods
            .iter()
            .find(|(_, p)| p.starts_with("knotless-isolated-a"))
            .cloned()
            .unwrap();
        backend
            .cluster
            .exec_in_pod(&ns, &pod, &["touch", "/work/release"])
            .await;
    };
    let (first_result, (second_result, second_text), ()) = tokio::join!(
        run_watched(&backend, &first_spec, &first_log, CancellationToken::new()),
        second_run,
        release
    );
    assert_eq!(
        first_result.status,
        RunStatus::Success,
        "{}",
        first_log.text()
    );
    assert_eq!(second_result.status, RunStatus::Success, "{second_text}");
    assert!(second_text.contains("second-ran"), "{second_text}");
    assert_nothing_left(&backend, &first.runner).await;
}
