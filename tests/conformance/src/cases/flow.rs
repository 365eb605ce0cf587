//! Steps after a failure: one that continues on error, one that ran out
//! of its own time, and the steps that always run, all in the one
//! environment the run began with.

use std::time::Duration;

use executor_core::{RunStatus, Step, StepStatus};

use crate::fixture::{assert_nothing_left, count_processes_script, run_to_end, Fixture};
use crate::Backend;

/// A step that continues on error lets the run go on; a step killed at
/// its own timeout (its children with it) ends the normal steps; a step
/// that always runs then still runs, in the same environment, and sees
/// what the earlier steps left.
pub async fn always_steps_run_after_a_failure_in_the_same_environment(backend: &dyn Backend) {
    let fx = Fixture::new("flow");
    let mut spec = fx
        .spec(backend, "flow")
        .step(
            Step::new("lint", "echo linted > \"$WORK_DIR/lint-state\"; exit 3")
                .continue_on_error(true),
        )
        .step(
            Step::new("hang", "sleep 7393 & echo hanging; exec sleep 7393")
                .timeout(Duration::from_secs(2)),
        )
        .step(Step::new("never", "echo must-not-run"))
        .step(
            Step::new(
                "report",
                format!(
                    "cat \"$WORK_DIR/lint-state\"; {}; cp \"$WORK_DIR/lint-state\" \"$OUTPUTS_DIR/report\"",
                    count_processes_script("sleep 7393")
                ),
            )
            .always(true),
        );
    // The run's own step limit is long: only the step's own one strikes.
    spec.step_timeout = Duration::from_secs(600);
    let (result, log) = run_to_end(backend, &spec).await;
    let text = log.text();
    let statuses: Vec<_> = result.steps.iter().map(|s| s.status).collect();
    assert_eq!(
        statuses,
        [
            StepStatus::Failed,
            StepStatus::Timeout,
            StepStatus::Skipped,
            StepStatus::Success
        ],
        "{text}"
    );
    assert_eq!(result.status, RunStatus::Timeout, "{text}");
    assert_eq!(result.steps[0].exit_code, Some(3));
    assert!(
        result.failure.as_ref().and_then(|f| f.step.as_deref()) == Some("hang"),
        "{:?}",
        result.failure
    );
    assert!(!text.contains("must-not-run"), "{text}");
    assert!(text.contains("marker-processes=0"), "{text}");
    assert_eq!(
        std::fs::read_to_string(fx.outputs().join("report")).unwrap_or_default(),
        "linted\n",
        "{text}"
    );
    assert_nothing_left(backend, &fx.runner).await;
}
