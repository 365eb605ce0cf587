//! A step's user and the processes it leaves

use super::*;

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

/// A step a resumed runner may not have started (`follow_from` at no
/// byte) and finds not started goes through the container's channel as
/// a first start does: the agent starts it, so its status is signed and
/// the log records that it must be.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test]
async fn a_step_a_new_runner_starts_anew_goes_through_the_channel() {
    let backend = docker_with(common::options()).await;
    let fx = Fixture::new("anew");
    let spec = fx.spec(&backend, "anew");
    let executor = &backend.0;
    let handle = executor
        .start(&spec, &RunLog::discard(), CancellationToken::new())
        .await
        .unwrap();
    let step = executor_core::StepCommand {
        id: executor_core::labels::random_hex(8),
        follow_from: Some(executor_core::Offsets::default()),
        upcoming: Vec::new(),
        name: "s".into(),
        script: "tr '\\0' ' ' < /proc/$PPID/cmdline".into(),
        env: handle.standard_env(),
    };
    let (log, text) = RunLog::memory();
    let outcome = executor
        .command(&handle, &step, &log, CancellationToken::new())
        .await
        .unwrap();
    log.flush(std::time::Duration::from_secs(30)).await;
    let text = text.text();
    assert_eq!(outcome, executor_core::CommandOutcome::exited(0), "{text}");
    assert!(
        text.lines().any(|l| l
            .split(' ')
            .next()
            .unwrap_or_default()
            .ends_with(executor_container::detached::AGENT_FILE)),
        "the step's parent is not the agent: {text}"
    );
    assert!(log.signs_statuses(), "{text}");
    executor.stop(&handle).await.unwrap();
    assert!(backend.leftovers(&fx.runner).await.is_empty());
}
