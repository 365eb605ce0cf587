//! The failure record, and retries of only what a fresh attempt can fix.

use std::time::Duration;

use executor_core::{
    run_with, DriverOptions, Executor, FailureKind, RetryPolicy, RunResult, RunSpec, RunStatus,
    Step, StepStatus,
};
use tokio_util::sync::CancellationToken;

use crate::fixture::{assert_nothing_left, assert_valid_result, bounded, Fixture, WatchedLog};
use crate::hooked::Hooked;
use crate::Backend;

/// Retries with no pause worth waiting for: the cases are about which
/// failures are retried, not about the backoff.
fn retrying(max_retries: u32) -> DriverOptions {
    DriverOptions {
        retry: RetryPolicy {
            max_retries,
            backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(10),
        },
        ..DriverOptions::default()
    }
}

async fn run_retrying(
    executor: &dyn Executor,
    spec: &RunSpec,
    options: &DriverOptions,
) -> (RunResult, WatchedLog) {
    let log = WatchedLog::default();
    let result = bounded(run_with(
        executor,
        spec,
        &log.run_log(),
        CancellationToken::new(),
        options,
    ))
    .await;
    assert_valid_result(&result);
    (result, log)
}

/// A failing step is a `step` failure named after it, on the run and on
/// the step, not retryable, exit code 1; a timeout is a `timeout`.
pub async fn failures_name_their_kind_and_step(backend: &dyn Backend) {
    let fx = Fixture::new("kinds");
    let spec = fx
        .spec(backend, "kinds")
        .step(Step::new("fine", "true"))
        .step(Step::new("broken", "exit 3"))
        .step(Step::new("never", "true"));
    let (result, log) = crate::fixture::run_to_end(backend, &spec).await;
    assert_eq!(result.status, RunStatus::Failed, "{}", log.text());
    let failure = result.failure.clone().expect("a failure record");
    assert_eq!(failure.kind, FailureKind::Step);
    assert!(!failure.retryable);
    assert_eq!(failure.step.as_deref(), Some("broken"));
    assert!(failure.message.contains("exited 3"), "{}", failure.message);
    assert_eq!(result.steps[0].failure, None);
    assert_eq!(result.steps[1].failure.as_ref(), Some(&failure));
    assert_eq!(result.steps[2].failure, None);
    assert_eq!(result.exit_code(), 1);
    assert_eq!(result.attempts.len(), 1);

    let mut spec = fx
        .spec(backend, "kinds-timeout")
        .step(Step::new("hang", "exec sleep 600"));
    spec.step_timeout = Duration::from_secs(2);
    let (result, log) = crate::fixture::run_to_end(backend, &spec).await;
    let failure = result.failure.clone().expect("a failure record");
    assert_eq!(failure.kind, FailureKind::Timeout, "{}", log.text());
    assert_eq!(failure.step.as_deref(), Some("hang"));
    assert_eq!(result.exit_code(), 124);
    assert_nothing_left(backend, &fx.runner).await;
}

/// `--retry` never runs a step failure again: the step would only fail
/// again, and its side effects would happen twice.
pub async fn retry_never_follows_a_step_failure(backend: &dyn Backend) {
    let fx = Fixture::new("noretry");
    let spec = fx
        .spec(backend, "no-retry")
        .step(Step::new("broken", "echo ran-once; exit 4"));
    let (result, log) = run_retrying(backend.executor(), &spec, &retrying(3)).await;
    assert_eq!(result.status, RunStatus::Failed, "{}", log.text());
    assert_eq!(result.attempts.len(), 1, "{}", log.text());
    assert_eq!(log.text().matches("ran-once").count(), 1, "{}", log.text());
    assert!(!log.text().contains("attempt 2"), "{}", log.text());
    // The log says why the run was not retried.
    assert!(
        log.text()
            .contains("not retrying: step failure: a step failed"),
        "{}",
        log.text()
    );
    let failure = result.failure.expect("a failure record");
    assert_eq!(
        (failure.kind, failure.retryable),
        (FailureKind::Step, false)
    );
    assert_nothing_left(backend, &fx.runner).await;
}

/// An environment lost from outside between two steps (the container
/// removed, the pod deleted) is `environmentLost`, retryable, in the step
/// that met it; the retry runs the whole run again in a fresh environment
/// and succeeds, keeping both attempts and only the last one's outputs.
/// A backend with nothing to lose ([`Backend::lose_environment`]) lists it
/// as ignored (`lose_environment` in [`conformance_tests!`](crate::conformance_tests)).
pub async fn retry_recovers_from_a_lost_environment(backend: &dyn Backend) {
    let fx = Fixture::new("retry");
    let spec = fx
        .spec(backend, "retry")
        .step(Step::new(
            "first",
            "echo one > \"$OUTPUTS_DIR/first.txt\"; hostname > \"$OUTPUTS_DIR/host.txt\"",
        ))
        .step(Step::new(
            "second",
            "echo two > \"$OUTPUTS_DIR/second.txt\"",
        ));
    let lossy = Hooked::new(backend, &fx.runner).losing_environment_before("second");
    let (result, log) = run_retrying(&lossy, &spec, &retrying(2)).await;
    assert!(
        lossy.lost(),
        "this backend has no environment to lose: give conformance_tests! \
         `lose_environment: \"why\"`\n{}",
        log.text()
    );
    let text = log.text();
    assert_eq!(result.status, RunStatus::Success, "{text}");
    assert_eq!(result.failure, None);
    assert_eq!(result.attempts.len(), 2, "{text}");
    let lost = result.attempts[0]
        .failure
        .clone()
        .expect("attempt 1 failed");
    assert_eq!(lost.kind, FailureKind::EnvironmentLost, "{lost:?}");
    assert!(lost.retryable);
    assert_eq!(lost.step.as_deref(), Some("second"));
    assert_eq!(result.attempts[0].status, RunStatus::Error);
    assert_eq!(result.attempts[0].steps[1].status, StepStatus::Error);
    assert_eq!(result.attempts[1].failure, None);
    assert_eq!(result.attempts[1].steps, result.steps);
    assert!(text.contains("attempt 1 of 3"), "{text}");
    assert!(text.contains("attempt 2 of 3"), "{text}");
    assert!(!text.contains("attempt 3 of 3"), "{text}");
    // Only the successful attempt's outputs, each once.
    let names: Vec<&str> = result.outputs.iter().map(|o| o.path.as_str()).collect();
    assert_eq!(names, ["first.txt", "host.txt", "second.txt"], "{text}");
    assert_nothing_left(backend, &fx.runner).await;
}

/// A step that ends its own supervisor leaves no status behind: an
/// infrastructure error (`internal`), never a success and never retried,
/// as nothing a step can cause is. Where the step's parent is not a
/// supervisor of the runner's (the shell backend runs steps as its own
/// children), the step leaves it alone and succeeds.
pub async fn a_step_that_ends_its_supervisor_is_not_retried(backend: &dyn Backend) {
    let fx = Fixture::new("endsup");
    let script = r#"echo ran-once
case "$(tr '\0' ' ' < /proc/$PPID/cmdline)" in *knotless-agent*|*_kd=*) kill -9 "$PPID";; esac
exit 0"#;
    let spec = fx
        .spec(backend, "ends-supervisor")
        .step(Step::new("ender", script));
    let (result, log) = run_retrying(backend.executor(), &spec, &retrying(3)).await;
    let text = log.text();
    assert_eq!(result.attempts.len(), 1, "{text}");
    assert_eq!(text.matches("ran-once").count(), 1, "{text}");
    if result.status != RunStatus::Success {
        assert_eq!(result.status, RunStatus::Error, "{text}");
        assert_eq!(result.steps[0].exit_code, None, "{text}");
        let failure = result.failure.expect("a failure record");
        assert_eq!(
            (failure.kind, failure.retryable),
            (FailureKind::Internal, false),
            "{text}"
        );
    }
    assert_nothing_left(backend, &fx.runner).await;
}
