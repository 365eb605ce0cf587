//! Cut streams, idle fronts, retried calls and expiring watches

use super::*;

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
    // The pod answered that the supervisor is gone without a status: the
    // step's own processes can do that, so it is never retried.
    assert!(err.to_string().contains("was lost"), "{err}");
    assert_eq!(err.kind(), FailureKind::Internal);
    assert!(!err.retryable(), "{err}");
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

/// Steps start through the pod's step channel; the channel's stream is
/// cut at chosen bytes: at its first byte (the start's message sent, no
/// answer yet), inside the begin mark, and mid-output. Every step still
/// runs exactly once, with its own code, on v5 and on v4.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_cut_at_any_byte_starts_each_step_exactly_once() {
    for v4_only in [false, true] {
        let backend = K8s::start(
            ClusterOptions {
                v4_only,
                ..ClusterOptions::default()
            },
            common::options(),
        )
        .await;
        let fx = Fixture::new("channel-cut");
        let mut spec = fx.spec(&backend, "channel-cut");
        for i in 0..4 {
            spec = spec.step(Step::new(
                format!("s{i}"),
                format!("echo s{i} >> \"$WORK_DIR/ran\"; i=0; while [ $i -lt 50 ]; do echo \"s{i} line $i\"; i=$((i+1)); done"),
            ));
        }
        spec = spec.step(Step::new("count", "cat \"$WORK_DIR/ran\"; exit 3"));
        backend.cluster.faults().cut_execs_after(&[1, 9, 300]);
        let (result, log) = run_to_end(&backend, &spec).await;
        let text = log.text();
        assert_eq!(
            result.status,
            RunStatus::Failed,
            "v4 only {v4_only}: {text}"
        );
        assert_eq!(
            result.steps[4].exit_code,
            Some(3),
            "v4 only {v4_only}: {text}"
        );
        for i in 0..4 {
            assert_eq!(
                result.steps[i].status,
                StepStatus::Success,
                "v4 only {v4_only}: {text}"
            );
            assert_eq!(
                text.matches(&format!("s{i} line 49\n")).count(),
                1,
                "v4 only {v4_only}: every line once: {text}"
            );
        }
        let ran: Vec<&str> = text
            .lines()
            .filter(|l| l.len() == 2 && l.starts_with('s'))
            .collect();
        assert_eq!(ran, ["s0", "s1", "s2", "s3"], "v4 only {v4_only}: {text}");
        assert!(
            text.contains("following it on"),
            "v4 only {v4_only}: no cut came: {text}"
        );
        assert_nothing_left(&backend, &fx.runner).await;
    }
}
