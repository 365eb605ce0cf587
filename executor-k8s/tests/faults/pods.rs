//! Pods that wait, cannot be scheduled or pulled, and die mid step

use super::*;

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
