//! Faults and bad input on the real engine, each with its own test.

mod common;

use std::sync::Arc;

use executor_conformance::fixture::{
    assert_valid_result, run_to_end, run_watched, Fixture, WatchedLog,
};
use executor_conformance::Backend;
use executor_core::labels::{label_value, EXPIRES_KEY, RUNNER_LABEL, RUNNER_RAW_KEY};
use executor_core::{CleanupScope, Executor, FailureKind, RunLog, RunStatus, Step, StepStatus};
use executor_docker::engine::{ContainerSpec, Engine};
use executor_docker::{BollardEngine, DockerExecutor, DockerOptions, PullPolicy};
use tokio_util::sync::CancellationToken;

use common::Docker;

async fn docker_with(options: DockerOptions) -> Docker {
    Docker(common::executor(options).await)
}

async fn engine() -> BollardEngine {
    BollardEngine::connect()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

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
    assert_eq!(result.steps[1].exit_code, Some(137));
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

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test]
async fn a_killed_runners_container_is_removed_by_the_next_cleanup_and_no_other() {
    let fx = Fixture::new("crashed");
    let other = Fixture::new("bystander");
    // A runner that starts a run and dies before stopping it.
    let crashed = docker_with(common::options()).await;
    let spec = fx.spec(&crashed, "crashed").step(Step::new("x", "true"));
    let handle = crashed
        .0
        .start(&spec, &RunLog::discard(), CancellationToken::new())
        .await
        .unwrap();
    drop(crashed);
    // Another runner's live run, which must survive.
    let bystander = docker_with(common::options()).await;
    let other_spec = other.spec(&bystander, "bystander");
    let other_handle = bystander
        .0
        .start(&other_spec, &RunLog::discard(), CancellationToken::new())
        .await
        .unwrap();

    let next = docker_with(common::options()).await;
    // Not expired yet: the default cleanup leaves it.
    let report = next
        .0
        .cleanup(&fx.runner, CleanupScope::Expired)
        .await
        .unwrap();
    assert!(report.removed.is_empty(), "{report:?}");
    // --force removes it, and only it.
    let report = next.0.cleanup(&fx.runner, CleanupScope::All).await.unwrap();
    assert_eq!(report.removed, vec![handle.id.clone()]);
    assert!(next.leftovers(&fx.runner).await.is_empty());
    // The bystander's container, and the volumes it still uses.
    let theirs = next.leftovers(&other.runner).await;
    assert_eq!(
        next.0.containers(&other.runner).await.unwrap(),
        vec![other_handle.id.clone()]
    );
    assert!(theirs.len() > 1, "its volumes are listed too: {theirs:?}");
    bystander.0.stop(&other_handle).await.unwrap();
}

/// Two runner DIDs that share a label: past the label's 54 characters
/// only a 32-bit digest tells DIDs apart, so a pair is found by trying
/// some 10^5 tails (a birthday search).
fn colliding_runners(prefix: &str) -> (String, String) {
    let long = format!("{prefix}-{}", "x".repeat(64));
    let mut seen = std::collections::HashMap::new();
    for n in 0u64.. {
        let raw = format!("{long}-{n}");
        if let Some(earlier) = seen.insert(label_value(&raw), raw.clone()) {
            return (earlier, raw);
        }
    }
    unreachable!("the tails are endless")
}

/// Two runners whose labels collide. Cleanup goes by the raw DID, so
/// neither removes the other's container or volumes.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test]
async fn cleanup_tells_apart_runners_whose_labels_collide() {
    let mut fx = Fixture::new("collide");
    let mut twin = Fixture::new("collide-twin");
    (fx.runner, twin.runner) = colliding_runners(&fx.runner);
    assert_ne!(twin.runner, fx.runner);
    assert_eq!(label_value(&twin.runner), label_value(&fx.runner));

    // Both runs are left by a runner that died, so neither is live here.
    let crashed = docker_with(common::options()).await;
    let mut handles = Vec::new();
    for (f, name) in [(&fx, "collide"), (&twin, "collide-twin")] {
        let spec = f.spec(&crashed, name).step(Step::new("x", "true"));
        let handle = crashed
            .0
            .start(&spec, &RunLog::discard(), CancellationToken::new())
            .await
            .unwrap();
        handles.push(handle);
    }
    drop(crashed);
    let docker = docker_with(common::options()).await;
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    let before = sorted(docker.leftovers(&fx.runner).await);
    let twins = docker.0.cleanup(&twin.runner, CleanupScope::All).await;
    let twin_left = docker.leftovers(&twin.runner).await;
    let fx_containers = docker.0.containers(&fx.runner).await;
    let fx_after = sorted(docker.leftovers(&fx.runner).await);
    // Cleared before judging, so a failure leaves nothing on the engine.
    let fxs = docker.0.cleanup(&fx.runner, CleanupScope::All).await;
    let both_left = [
        docker.leftovers(&fx.runner).await,
        docker.leftovers(&twin.runner).await,
    ];

    assert_eq!(twins.unwrap().removed, vec![handles[1].id.clone()]);
    assert!(twin_left.is_empty(), "{twin_left:?}");
    assert_eq!(
        fx_containers.unwrap(),
        vec![handles[0].id.clone()],
        "the other runner's container was taken"
    );
    assert_eq!(fx_after, before, "the other runner's volumes were taken");
    assert_eq!(fxs.unwrap().removed, vec![handles[0].id.clone()]);
    assert!(both_left.iter().all(Vec::is_empty), "{both_left:?}");
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test]
async fn expired_containers_are_removed_by_the_default_cleanup() {
    let fx = Fixture::new("expired");
    let engine = engine().await;
    let labels = [
        (RUNNER_LABEL, label_value(&fx.runner)),
        (RUNNER_RAW_KEY, fx.runner.clone()),
        (EXPIRES_KEY, "1".to_string()),
    ];
    let spec = ContainerSpec {
        name: format!("knotless-expired-{}", std::process::id()),
        image: common::image(),
        cmd: vec!["sleep".into(), "600".into()],
        entrypoint: None,
        env: vec![],
        network_aliases: vec![],
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
        user: None,
        working_dir: "/".into(),
        memory: None,
        nano_cpus: None,
        network_mode: Some("none".into()),
        security_opt: vec![],
        volumes: vec![],
        pids_limit: None,
        cap_drop: vec![],
        cap_add: vec![],
        read_only: false,
        secret_env: vec![],
    };
    let id = engine.create(&spec).await.unwrap();
    let executor = DockerExecutor::with_engine(Arc::new(engine), common::options());
    let report = executor
        .cleanup(&fx.runner, CleanupScope::Expired)
        .await
        .unwrap();
    assert_eq!(report.removed, vec![id]);
    assert!(executor.leftovers(&fx.runner).await.unwrap().is_empty());
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test]
async fn steps_run_unprivileged_as_the_chosen_user() {
    let backend = docker_with(DockerOptions {
        user: Some("65534:65534".into()),
        ..common::options()
    })
    .await;
    let fx = Fixture::new("user");
    std::fs::write(fx.checkout().join("in.txt"), "x").unwrap();
    let spec = fx.spec(&backend, "user").step(Step::new(
        "whoami",
        r#"[ "$(id -u)" = 65534 ]
           grep -q '^NoNewPrivs:[[:space:]]*1' /proc/self/status
           echo more >> in.txt && touch "$OUTPUTS_DIR/made-by-user"
           echo user-ok"#,
    ));
    let (result, log) = run_to_end(&backend, &spec).await;
    assert_eq!(result.status, RunStatus::Success, "{}", log.text());
    assert!(fx.outputs().join("made-by-user").exists());
    assert!(backend.leftovers(&fx.runner).await.is_empty());
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test]
async fn a_background_process_does_not_hold_the_step() {
    let backend = docker_with(common::options()).await;
    let fx = Fixture::new("background");
    let spec = fx
        .spec(&backend, "background")
        .step(Step::new("spawn", "sleep 600 & echo spawned"))
        .step(Step::new("next", "echo next-ran"));
    let (result, log) = run_to_end(&backend, &spec).await;
    assert_eq!(result.status, RunStatus::Success, "{}", log.text());
    assert!(log.text().contains("next-ran"));
    assert_valid_result(&result);
    assert!(backend.leftovers(&fx.runner).await.is_empty());
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test]
async fn an_interrupted_step_leaves_no_process_behind() {
    let backend = docker_with(common::options()).await;
    let fx = Fixture::new("killtree");
    let spec = fx.spec(&backend, "kill-tree");
    let executor = &backend.0;
    let handle = executor
        .start(&spec, &RunLog::discard(), CancellationToken::new())
        .await
        .unwrap();
    let step = |script: &str| executor_core::StepCommand {
        id: executor_core::labels::random_hex(8),
        follow_from: None,
        upcoming: Vec::new(),
        name: "s".into(),
        script: script.into(),
        env: handle.standard_env(),
    };
    // A step with a child and a grandchild, interrupted while they run.
    let log = WatchedLog::default();
    let token = CancellationToken::new();
    let run_log = log.run_log();
    let tree = step("sh -c 'sleep 600 & echo $! > /work/grandchild; wait' & echo $! > /work/child; echo tree-up; wait");
    let interrupted = executor.command(&handle, &tree, &run_log, token.clone());
    let interrupt = async {
        log.wait_for("tree-up").await;
        token.cancel();
    };
    let (outcome, ()) = tokio::join!(interrupted, interrupt);
    assert_eq!(outcome.unwrap(), executor_core::CommandOutcome::Interrupted);
    // Every process of the tree is gone (zombies reaped by the init count as gone).
    let check = step(
        r#"for f in child grandchild; do
             p=$(cat /work/$f)
             if [ -e /proc/$p/stat ] && ! grep -q ') Z' /proc/$p/stat; then echo "$f $p alive"; exit 1; fi
           done"#,
    );
    let outcome = executor
        .command(
            &handle,
            &check,
            &RunLog::discard(),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(outcome, executor_core::CommandOutcome::exited(0));
    executor.stop(&handle).await.unwrap();
    assert!(backend.leftovers(&fx.runner).await.is_empty());
}
