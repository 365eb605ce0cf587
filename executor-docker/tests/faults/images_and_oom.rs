//! Missing images, silent registries, OOM kills and a container removed mid step

use super::*;

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test]
async fn missing_image_with_pull_never_is_a_clear_fast_error() {
    let backend = docker_with(common::options()).await;
    let fx = Fixture::new("noimage");
    let mut spec = fx
        .spec(&backend, "no-image")
        .step(Step::new("never", "true"));
    spec.image = Some("knotless-no-such-image:nope".into());
    let (result, _) = run_to_end(&backend, &spec).await;
    assert_eq!(result.status, RunStatus::Error);
    let error = result.error.unwrap_or_default();
    assert!(
        error.contains("knotless-no-such-image:nope is not on the engine"),
        "{error}"
    );
    assert!(
        error.contains("DockerOptions::pull PullPolicy::Never"),
        "{error}"
    );
    let failure = result.failure.unwrap();
    assert_eq!(failure.kind, FailureKind::Image);
    assert!(!failure.retryable, "a missing image stays missing");
    assert!(backend.leftovers(&fx.runner).await.is_empty());
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test]
async fn a_pull_from_a_registry_that_does_not_answer_is_a_retryable_image_failure() {
    let backend = docker_with(DockerOptions {
        pull: PullPolicy::Always,
        ..common::options()
    })
    .await;
    let fx = Fixture::new("pullfail");
    let mut spec = fx
        .spec(&backend, "pull-fail")
        .step(Step::new("never", "true"));
    // Nothing listens on port 1: the engine's pull is refused at connect.
    spec.image = Some("localhost:1/knotless/busybox:1".into());
    let (result, _) = run_to_end(&backend, &spec).await;
    assert_eq!(result.status, RunStatus::Error);
    let failure = result.failure.unwrap();
    assert_eq!(failure.kind, FailureKind::Image, "{}", failure.message);
    assert!(failure.retryable, "{}", failure.message);
    assert!(
        failure.message.contains("localhost:1"),
        "{}",
        failure.message
    );
    assert!(backend.leftovers(&fx.runner).await.is_empty());
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test]
async fn container_removed_from_outside_mid_step_is_an_error_not_a_hang() {
    let backend = docker_with(common::options()).await;
    let fx = Fixture::new("killed");
    let spec = fx
        .spec(&backend, "killed")
        .step(Step::new("victim", "echo kill-me-now; exec sleep 600"))
        .step(Step::new("after", "true"));
    let log = WatchedLog::default();
    let killer = async {
        log.wait_for("kill-me-now").await;
        let ids = backend.0.containers(&fx.runner).await.unwrap();
        assert_eq!(ids.len(), 1);
        engine().await.remove(&ids[0]).await.unwrap();
    };
    let (result, ()) = tokio::join!(
        run_watched(&backend, &spec, &log, CancellationToken::new()),
        killer
    );
    assert_eq!(result.status, RunStatus::Error, "{}", log.text());
    assert_eq!(result.steps[0].status, StepStatus::Error);
    assert_eq!(result.steps[1].status, StepStatus::Skipped);
    let error = result.steps[0].error.clone().unwrap_or_default();
    assert!(error.contains("environment lost"), "{error}");
    let failure = result.failure.unwrap();
    assert_eq!(failure.kind, FailureKind::EnvironmentLost);
    assert!(failure.retryable);
    assert_eq!(failure.step.as_deref(), Some("victim"));
    assert!(backend.leftovers(&fx.runner).await.is_empty());
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test]
async fn oom_kill_is_reported_as_such() {
    let backend = docker_with(DockerOptions {
        memory: Some(32 << 20),
        ..common::options()
    })
    .await;
    let fx = Fixture::new("oom");
    let spec = fx
        .spec(&backend, "oom")
        .step(Step::new(
            "score",
            "echo \"score $(cat /proc/self/oom_score_adj)\"",
        ))
        .step(Step::new(
            "hog",
            r#"x=$(head -c 200000000 /dev/zero | tr '\0' a); echo survived"#,
        ));
    let (result, log) = run_to_end(&backend, &spec).await;
    assert_eq!(result.status, RunStatus::Failed, "{}", log.text());
    // The step, not the keep-alive, is the OOM killer's choice.
    assert!(log.text().contains("score 1000"), "{}", log.text());
    // Killed, the step's shell exits 137, unless the kernel, short of
    // memory, took the step's supervisor too (seen under load in
    // .ci/run): then there is no code, and the counters still make it the
    // step's OOM, as the cases below expect too.
    assert!(
        matches!(result.steps[1].exit_code, Some(137) | None),
        "{:?}\n{}",
        result.steps[1].exit_code,
        log.text()
    );
    let error = result.steps[1].error.clone().unwrap_or_default();
    assert!(error.starts_with("OOMKilled"), "{error}");
    assert!(error.contains("32 MiB"), "{error}");
    let failure = result.failure.unwrap();
    assert_eq!(failure.kind, FailureKind::Oom);
    assert_eq!(failure.step.as_deref(), Some("hog"));
    assert!(!failure.retryable, "the step would only run out again");
    assert!(backend.leftovers(&fx.runner).await.is_empty());
}

/// A step whose child was OOM-killed and that exits with a code of its
/// own is still an OOM failure: the container's counters say, not the code.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test]
async fn an_oom_kill_passed_on_as_another_code_is_still_oom() {
    let backend = docker_with(DockerOptions {
        memory: Some(32 << 20),
        ..common::options()
    })
    .await;
    let fx = Fixture::new("oomcode");
    let spec = fx.spec(&backend, "oom-code").step(Step::new(
        "hog",
        r#"sh -c "x=\$(head -c 200000000 /dev/zero | tr '\0' a)" || exit 1"#,
    ));
    let (result, log) = run_to_end(&backend, &spec).await;
    assert_eq!(result.status, RunStatus::Failed, "{}", log.text());
    // The step's own code, unless the kernel, short of memory, took the
    // step's supervisor too (seen under load): then there is no code, and
    // the counters still make it the step's OOM, never a lost status.
    assert!(
        matches!(result.steps[0].exit_code, Some(1) | None),
        "{:?}\n{}",
        result.steps[0].exit_code,
        log.text()
    );
    let failure = result.failure.unwrap();
    assert_eq!(failure.kind, FailureKind::Oom, "{}", failure.message);
    assert!(backend.leftovers(&fx.runner).await.is_empty());
}

/// An OOM kill a step survived is not a later step's: a later step that
/// fails of its own is a step failure, with its own code and words.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test]
async fn an_oom_kill_an_earlier_step_survived_is_not_a_later_steps() {
    let backend = docker_with(DockerOptions {
        memory: Some(32 << 20),
        ..common::options()
    })
    .await;
    let fx = Fixture::new("oomearlier");
    let spec = fx
        .spec(&backend, "oom-earlier")
        .step(Step::new(
            "survive",
            r#"sh -c "x=\$(head -c 200000000 /dev/zero | tr '\0' a)" || echo survived"#,
        ))
        .step(Step::new("fail", "echo failing; exit 3"));
    let (result, log) = run_to_end(&backend, &spec).await;
    let text = log.text();
    assert!(text.contains("survived"), "{text}");
    assert_eq!(result.steps[0].status, StepStatus::Success, "{text}");
    assert_eq!(result.steps[1].exit_code, Some(3), "{text}");
    let failure = result.failure.unwrap();
    assert_eq!(failure.kind, FailureKind::Step, "{}", failure.message);
    assert_eq!(failure.step.as_deref(), Some("fail"));
    assert!(backend.leftovers(&fx.runner).await.is_empty());
}

/// The agent reports the container's memory limit with every step's
/// usage, and a step whose peak comes within a tenth of it is warned of
/// in the log; a step far below it is not.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test]
async fn each_step_reports_the_memory_limit_and_a_near_one_is_warned_of() {
    const LIMIT: i64 = 100 << 20;
    let backend = docker_with(DockerOptions {
        memory: Some(LIMIT),
        ..common::options()
    })
    .await;
    let fx = Fixture::new("nearlimit");
    let spec = fx
        .spec(&backend, "near-limit")
        .step(Step::new("small", "true"))
        // dd holds its 96 MB block (over 0.9 of 100 MiB) while sleep
        // does not read it.
        .step(Step::new(
            "near",
            "dd if=/dev/zero bs=96000000 count=1 2>/dev/null | sleep 1",
        ));
    let (result, log) = run_to_end(&backend, &spec).await;
    let text = log.text();
    assert_eq!(result.status, RunStatus::Success, "{text}");
    for step in &result.steps {
        let usage = step
            .usage
            .unwrap_or_else(|| panic!("{}: no usage", step.name));
        assert_eq!(
            usage.memory_limit_bytes,
            u64::try_from(LIMIT).ok(),
            "{}: {usage:?}",
            step.name
        );
    }
    let warned = |name: &str| {
        text.lines().any(|l| {
            l.contains(&format!("step {name}: its peak memory"))
                && l.contains("the environment's memory limit (100 MiB)")
        })
    };
    assert!(warned("near"), "{text}");
    assert!(!warned("small"), "{text}");
    assert!(backend.leftovers(&fx.runner).await.is_empty());
}
