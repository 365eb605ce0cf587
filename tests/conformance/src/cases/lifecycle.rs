//! The run's life: timeouts, cancellation, failed start, concurrency, cleanup.

use std::time::Duration;

use executor_core::{CleanupScope, RunStatus, Step, StepStatus};
use tokio_util::sync::CancellationToken;

use crate::fixture::{
    assert_nothing_left, count_processes_script, run_on, run_to_end, run_watched, Fixture,
    WatchedLog, PATIENCE,
};
use crate::hooked::Hooked;
use crate::Backend;

/// A step over its step timeout is killed and recorded as `timeout`; the
/// rest are skipped.
pub async fn step_timeout_kills_step(backend: &dyn Backend) {
    let fx = Fixture::new("steptimeout");
    // A child in the background, and the step itself: both must die.
    let mut spec = fx
        .spec(backend, "step-timeout")
        .step(Step::new(
            "hang",
            "sleep 7391 & echo hanging; exec sleep 7391",
        ))
        .step(Step::new("after", "echo after"));
    spec.step_timeout = Duration::from_secs(2);
    let probing =
        Hooked::new(backend, &fx.runner).probing_before_stop(&count_processes_script("sleep 7391"));
    let log = WatchedLog::default();
    let result = run_on(&probing, &spec, &log, CancellationToken::new()).await;
    // Killed by the backend, not by stop tearing everything down after.
    let probe = probing.probe_output().unwrap_or_default();
    assert!(
        probe.contains("marker-processes=0"),
        "{probe}\n{}",
        log.text()
    );
    assert_eq!(result.status, RunStatus::Timeout, "{}", log.text());
    assert_eq!(result.steps[0].status, StepStatus::Timeout);
    assert_eq!(result.steps[0].exit_code, None);
    assert_eq!(result.steps[1].status, StepStatus::Skipped);
    assert!(result
        .error
        .as_deref()
        .unwrap_or("")
        .contains("step timeout"));
    assert_nothing_left(backend, &fx.runner).await;
}

/// The run timeout ends the run wherever it is, here mid-step: a budget
/// that start and the first step fit in many times over, so the timeout
/// can only strike in the step that hangs.
pub async fn run_timeout_ends_run(backend: &dyn Backend) {
    let fx = Fixture::new("runtimeout");
    let mut spec = fx
        .spec(backend, "run-timeout")
        .step(Step::new("quick", "true"))
        .step(Step::new("hang", "echo hanging; exec sleep 600"))
        .step(Step::new("after", "true"));
    spec.run_timeout = Duration::from_secs(12);
    spec.step_timeout = PATIENCE;
    let (result, log) = run_to_end(backend, &spec).await;
    assert_eq!(result.status, RunStatus::Timeout, "{}", log.text());
    let statuses: Vec<_> = result.steps.iter().map(|s| s.status).collect();
    assert_eq!(
        statuses,
        [
            StepStatus::Success,
            StepStatus::Timeout,
            StepStatus::Skipped
        ],
        "{}",
        log.text()
    );
    assert!(log.text().contains("hanging"), "{}", log.text());
    let failure = result.failure.clone().expect("a failure record");
    assert_eq!(failure.kind, executor_core::FailureKind::Timeout);
    assert_eq!(failure.step.as_deref(), Some("hang"));
    assert!(
        failure.message.contains("run timeout"),
        "{}",
        failure.message
    );
    assert_nothing_left(backend, &fx.runner).await;
}

/// Cancellation mid-step kills the step, records `cancelled`, skips the
/// rest, still collects outputs and stops the environment.
pub async fn cancellation_mid_step(backend: &dyn Backend) {
    let fx = Fixture::new("cancel");
    let spec = fx
        .spec(backend, "cancel")
        .step(Step::new(
            "work",
            "echo partial > \"$OUTPUTS_DIR/partial.txt\"; sleep 7392 & echo cancel-me-now; exec sleep 7392",
        ))
        .step(Step::new("after", "true"));
    let log = WatchedLog::default();
    let cancel = CancellationToken::new();
    let observe = async {
        log.wait_for("cancel-me-now").await;
        cancel.cancel();
    };
    let probing =
        Hooked::new(backend, &fx.runner).probing_before_stop(&count_processes_script("sleep 7392"));
    let (result, ()) = tokio::join!(run_on(&probing, &spec, &log, cancel.clone()), observe);
    let probe = probing.probe_output().unwrap_or_default();
    assert!(
        probe.contains("marker-processes=0"),
        "{probe}\n{}",
        log.text()
    );
    assert_eq!(result.status, RunStatus::Cancelled, "{}", log.text());
    assert_eq!(result.steps[0].status, StepStatus::Cancelled);
    assert_eq!(result.steps[1].status, StepStatus::Skipped);
    let failure = result.failure.clone().expect("a failure record");
    assert_eq!(failure.kind, executor_core::FailureKind::Cancelled);
    assert_eq!(failure.step.as_deref(), Some("work"));
    assert_eq!(result.exit_code(), 130);
    assert_eq!(
        result.outputs.len(),
        1,
        "outputs are collected after a cancel"
    );
    assert_nothing_left(backend, &fx.runner).await;
}

/// A start that fails is an error result, every step skipped, and nothing
/// is left behind: both before anything exists (the checkout folder is
/// missing) and half way, once the environment exists (a socket in the
/// shared steps folder cannot be packed, and the steps go in after the
/// environment is made and the checkout is in it).
pub async fn failed_start_leaves_nothing(backend: &dyn Backend) {
    let fx = Fixture::new("badstart");
    let mut spec = fx
        .spec(backend, "bad-start")
        .step(Step::new("never", "true"));
    spec.checkout = fx.checkout().join("does-not-exist");
    let (result, _) = run_to_end(backend, &spec).await;
    assert_eq!(result.status, RunStatus::Error);
    assert!(result
        .error
        .as_deref()
        .unwrap_or("")
        .contains("does-not-exist"));
    assert_eq!(result.steps[0].status, StepStatus::Skipped);
    let failure = result.failure.clone().expect("a failure record");
    assert_eq!(failure.kind, executor_core::FailureKind::Input);
    assert_eq!(failure.step, None);
    assert_nothing_left(backend, &fx.runner).await;

    let fx = Fixture::new("halfstart");
    crate::fixture::write(&fx.checkout(), "big.bin", vec![7u8; 4 << 20]);
    let _socket = std::os::unix::net::UnixListener::bind(fx.steps().join("z.sock"))
        .unwrap_or_else(|e| panic!("{e}"));
    let spec = fx
        .spec(backend, "half-start")
        .steps_dir(fx.steps())
        .step(Step::new("never", "echo should-not-run"));
    let (result, log) = run_to_end(backend, &spec).await;
    let text = log.text();
    assert_eq!(result.status, RunStatus::Error, "{text}");
    assert!(
        result.error.as_deref().unwrap_or("").contains("z.sock"),
        "{text}"
    );
    assert_eq!(result.steps[0].status, StepStatus::Skipped);
    assert!(!text.contains("should-not-run"), "{text}");
    // The backend said what it made before start failed: the environment
    // existed, and its teardown is what left nothing.
    let made = text
        .lines()
        .skip_while(|l| !l.starts_with("==> run half-start on"))
        .skip(1)
        .take_while(|l| !l.starts_with("==> start failed"))
        .count();
    assert!(made > 0, "nothing was made before start failed:\n{text}");
    assert_nothing_left(backend, &fx.runner).await;
}

/// Two runs of the same runner at once do not see or disturb each other.
pub async fn concurrent_runs_are_isolated(backend: &dyn Backend) {
    let (a, b) = (Fixture::new("concurrent"), Fixture::new("concurrent"));
    let spec_for = |fx: &Fixture, who: &str| {
        let mut spec = fx
            .spec(backend, &format!("concurrent-{who}"))
            .step(Step::new(
                "mark",
                format!(
                    "[ ! -e marker ] && echo {who} > marker && cp marker \"$OUTPUTS_DIR/who.txt\""
                ),
            ));
        spec.runner = a.runner.clone();
        spec
    };
    let (sa, sb) = (spec_for(&a, "a"), spec_for(&b, "b"));
    let ((ra, _), (rb, _)) = tokio::join!(run_to_end(backend, &sa), run_to_end(backend, &sb));
    assert_eq!(
        (ra.status, rb.status),
        (RunStatus::Success, RunStatus::Success)
    );
    let read =
        |fx: &Fixture| std::fs::read_to_string(fx.outputs().join("who.txt")).unwrap_or_default();
    assert_eq!((read(&a), read(&b)), ("a\n".to_string(), "b\n".to_string()));
    assert_nothing_left(backend, &a.runner).await;
}

/// cleanup never removes a live run, even with [`CleanupScope::All`]: the
/// run it ran beside still collects its outputs and stops cleanly.
pub async fn cleanup_spares_live_runs(backend: &dyn Backend) {
    let fx = Fixture::new("cleanuplive");
    let spec = fx.spec(backend, "cleanup-live").step(Step::new(
        "busy",
        "echo alive > \"$OUTPUTS_DIR/alive.txt\"; echo busy-now; exec sleep 600",
    ));
    let log = WatchedLog::default();
    let cancel = CancellationToken::new();
    let observe = async {
        log.wait_for("busy-now").await;
        let report = backend
            .executor()
            .cleanup(&fx.runner, CleanupScope::All)
            .await
            .unwrap_or_else(|e| panic!("cleanup failed: {e}"));
        assert!(
            report.removed.is_empty(),
            "cleanup removed a live run: {report:?}"
        );
        cancel.cancel();
    };
    let (result, ()) = tokio::join!(run_watched(backend, &spec, &log, cancel.clone()), observe);
    assert_eq!(result.status, RunStatus::Cancelled, "{}", log.text());
    assert_eq!(result.error.as_deref(), Some("step busy: cancelled"));
    assert_eq!(result.outputs.len(), 1);
    assert_nothing_left(backend, &fx.runner).await;
}
