//! How a step ends, from its exit code, the pod and a lost status

use super::*;

fn running() -> Pod {
    pod(
        json!({"metadata": {"name": "p"}, "status": {"phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}]}}),
    )
}

#[tokio::test]
async fn exit_137_with_the_pod_oom_killed_is_an_oom_failure() {
    let mut cluster = MockCluster::new();
    cluster
        .expect_exec()
        .times(1)
        .return_once(|_, _, argv, _| Ok(step_exec(argv, "building\n", Ended::Exited(137))));
    cluster.expect_get_pod().times(1).return_once(|_| {
        Ok(Some(pod(json!({"metadata": {"name": "p"}, "status": {"phase": "Running",
            "containerStatuses": [{"name": "step", "image": "i", "imageID": "", "ready": false,
                "restartCount": 0, "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}}))))
    });
    let outcome = step(&live(cluster)).await.unwrap();
    assert!(
        matches!(
            outcome,
            CommandOutcome::OutOfMemory {
                code: Some(137),
                ..
            }
        ),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn exit_137_with_the_pod_deleted_is_a_lost_environment() {
    let mut cluster = MockCluster::new();
    cluster
        .expect_exec()
        .times(1)
        .return_once(|_, _, argv, _| Ok(step_exec(argv, "", Ended::Exited(137))));
    cluster.expect_get_pod().times(1).return_once(|_| Ok(None));
    let err = step(&live(cluster)).await.unwrap_err();
    assert!(matches!(err, ExecutorError::EnvironmentLost(_)), "{err}");
    assert!(err.retryable());
}

/// What a scripted exec is, from its argv: the step's start, its follow,
/// the read of its status, or the runner's probe.
fn kind_of(argv: &[String]) -> &'static str {
    match argv {
        [_, _, script] if script == executor_container::detached::CHANNEL => "start",
        [one] if one == "true" => "probe",
        [_, _, script, _] if script.starts_with("[ -p") => "started",
        [cat, _] if cat == "cat" => "status",
        [_, _, script] if script.contains("baseline %s") => "oom counters",
        [_, _, script, ..] if script.contains("mkfifo") => "start",
        [_, _, script, ..] if script.contains("while :") => "follow",
        _ => "other",
    }
}

/// A step whose supervisor is gone without a status, in a pod that
/// answers: `oom_kills` is what the pod's memory counters say since the
/// step started.
fn lost_status(oom_kills: &'static str) -> MockCluster {
    let mut cluster = MockCluster::new();
    cluster
        .expect_exec()
        .times(5)
        .returning(move |_, _, argv, _| {
            Ok(match kind_of(argv) {
                // Cut after its start went: its pipes are there.
                "started" => exec("", Ended::Exited(0)),
                // The step's output, then the connection drops: no status.
                "start" => exec("half", Ended::Closed("the exec connection broke".into())),
                // Its supervisor is gone and left no status.
                "follow" => step_exec(
                    argv,
                    "",
                    Ended::Exited(executor_container::detached::FOLLOW_LOST),
                ),
                "probe" => exec("", Ended::Exited(0)),
                "oom counters" => exec(oom_kills, Ended::Exited(0)),
                other => panic!("unexpected {other} exec: {argv:?}"),
            })
        });
    cluster
        .expect_get_pod()
        .times(1)
        .return_once(|_| Ok(Some(running())));
    cluster
}

#[tokio::test]
async fn a_status_that_never_came_from_a_pod_that_answers_is_lost_never_success() {
    let cluster = lost_status("oom_kill 0\nbaseline \n");
    let err = step(&live(cluster)).await.unwrap_err();
    // The pod answered: the step's processes could have done it.
    assert!(err.to_string().contains("was lost"), "{err}");
    assert_eq!(err.kind(), FailureKind::Internal);
    assert!(!err.retryable(), "{err}");
}

/// Under memory pressure the kernel can take the step's supervisor too,
/// and then no status is written: a kill the pod's counters show since
/// the step started makes it the step's OOM, not a lost status.
#[tokio::test]
async fn a_status_lost_to_an_oom_kill_in_the_pod_is_an_oom_failure() {
    let cluster = lost_status("oom_kill 2\nbaseline 1\n");
    let outcome = step(&live(cluster)).await.unwrap();
    assert!(
        matches!(outcome, CommandOutcome::OutOfMemory { code: None, .. }),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn a_step_whose_stream_broke_is_followed_to_its_own_code() {
    let mut cluster = MockCluster::new();
    let follows = Arc::new(Mutex::new(Vec::<Vec<String>>::new()));
    let seen = follows.clone();
    cluster.expect_exec().returning(move |_, _, argv, _| {
        Ok(match kind_of(argv) {
            "start" => step_exec(
                argv,
                "hal",
                Ended::Closed("the exec connection broke".into()),
            ),
            "follow" => {
                seen.lock().unwrap().push(argv.to_vec());
                step_exec(argv, "f-done\n", Ended::Exited(0))
            }
            "status" => exec("7\n", Ended::Exited(0)),
            "probe" | "started" => exec("", Ended::Exited(0)),
            // A failing code is put to the pod's memory counters: none.
            "oom counters" => exec("oom_kill 0\nbaseline \n", Ended::Exited(0)),
            other => panic!("unexpected {other} exec: {argv:?}"),
        })
    });
    cluster.expect_get_pod().returning(|_| Ok(Some(running())));
    let (log, text) = RunLog::memory();
    let outcome = live(cluster)
        .command(
            &RunHandle::in_container("job"),
            &StepCommand {
                id: executor_core::labels::random_hex(8),
                follow_from: None,
                upcoming: Vec::new(),
                name: "s".into(),
                script: "make".into(),
                env: Vec::new(),
            },
            &log,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(outcome, CommandOutcome::exited(7));
    // Followed from the third byte of stdout, none of stderr.
    let follows = follows.lock().unwrap().clone();
    assert_eq!(follows.len(), 1);
    assert_eq!(follows[0][4..6], ["3", "0"]);
    log.flush(std::time::Duration::from_secs(5)).await;
    let text = text.text();
    assert!(text.contains("hal") && text.contains("f-done"), "{text}");
}
