//! A run outlives its runner process.

use std::path::Path;
use std::sync::Arc;

use executor_core::events::Event;
use executor_core::resume::{resume_with, Mark};
use executor_core::{
    run_with, DriverOptions, Executor, ExecutorError, FailureKind, RunLog, RunResult, RunSpec,
    RunStatus, Step, StepStatus,
};
use tokio_util::sync::CancellationToken;

use crate::cases::steps::FORGES_AND_ENDS;
use crate::fixture::{assert_nothing_left, assert_valid_result, bounded, Fixture, PATIENCE};
use crate::Backend;

/// Runs `spec` with `log` until a step has printed `text`, then drops the
/// run at once, as a runner killed with SIGKILL would leave it.
async fn killed_once_printed(backend: &dyn Backend, spec: &RunSpec, log: &RunLog, text: &str) {
    let (seen_tx, mut seen) = tokio::sync::watch::channel(false);
    let text = text.to_string();
    log.add_sink(Arc::new(move |event: &Event| {
        if event
            .output_bytes()
            .is_some_and(|b| String::from_utf8_lossy(b).contains(&text))
        {
            seen_tx.send_replace(true);
        }
    }));
    let options = DriverOptions::default();
    let first = run_with(
        backend.executor(),
        spec,
        log,
        CancellationToken::new(),
        &options,
    );
    tokio::select! {
        _ = first => panic!("the run ended before the runner was killed"),
        waited = tokio::time::timeout(PATIENCE, seen.wait_for(|s| *s)) => {
            assert!(matches!(waited, Ok(Ok(_))), "no step printed what the runner is killed at");
        }
    }
}

/// The run `name` of `fx`, whose runner was killed with its log at
/// `path`, carried on to its end by `second` as a new runner process
/// would: its (valid) result, the mark it carried on from, and its log.
async fn carried_on(
    second: &dyn Executor,
    fx: &Fixture,
    name: &str,
    path: &Path,
) -> (RunResult, Mark, String) {
    let live = bounded(second.reattach(&fx.runner, name))
        .await
        .unwrap_or_else(|e| panic!("reattach: {e}"));
    let again = live
        .plan
        .clone()
        .into_spec(fx.outputs(), Vec::new())
        .unwrap_or_else(|e| panic!("{e}"));
    let (log, mark) = RunLog::resume(path).unwrap_or_else(|e| panic!("{e}"));
    let result = bounded(resume_with(
        second,
        &live,
        &again,
        &mark,
        &log,
        CancellationToken::new(),
        &DriverOptions::default(),
    ))
    .await;
    assert!(log.flush(PATIENCE).await, "the log never drained");
    drop(log);
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{e}"));
    assert_valid_result(&result);
    assert_eq!(result.steps.len(), again.steps.len(), "{text}");
    (result, mark, text)
}

/// A runner killed mid-step (its run dropped at once, as SIGKILL would,
/// with a last write its log's mark never counted) is resumed by another
/// executor, as a new runner process would be: the running step is
/// followed on with every line once and in order, the steps after it run,
/// the outputs come back, the result is the one the run would have had,
/// and nothing is left. A second resume of the finished run is refused.
/// A backend whose runs do not outlive their runner
/// ([`Backend::another_runner`]) lists it as ignored (`another_runner` in
/// [`conformance_tests!`](crate::conformance_tests)).
pub async fn a_killed_runner_is_resumed_with_the_right_result(backend: &dyn Backend) {
    let Some(second) = backend.another_runner().await else {
        panic!(
            "this backend's runs do not outlive their runner: give conformance_tests! \
             `another_runner: \"why\"`"
        );
    };
    let fx = Fixture::new("resumed");
    let spec = fx
        .spec(backend, "resumed")
        .step(
            Step::new(
                "before",
                "echo before > before.txt; echo v=from-before >> \"$STEP_OUTPUT\"",
            )
            .id("before"),
        )
        .step(Step::new(
            "slow",
            // The step's own pace: 60 ticks a tenth of a second apart, so
            // it is still running when the runner dies at the fifth.
            "i=1; while [ $i -le 60 ]; do echo tick-$i; echo err-$i >&2; \
             sleep 0.1; i=$((i+1)); done; cat before.txt > \"$OUTPUTS_DIR/seen.txt\"",
        ))
        // What an earlier runner's step wrote is read again by the resumed one.
        .step(
            Step::new("after", "echo \"after-ran $V\"; exit 3").input(
                "V",
                executor_core::expr::Template::parse("${{ steps.before.outputs.v }}")
                    .unwrap_or_else(|e| panic!("{e}")),
            ),
        );
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = dir.path().join("run.log");
    let log = RunLog::create_resumable(&path).unwrap_or_else(|e| panic!("{e}"));
    // The runner dies at the fifth tick: its run is dropped mid-step.
    killed_once_printed(backend, &spec, &log, "tick-5\n").await;
    assert!(log.flush(PATIENCE).await, "the log never drained");
    drop(log);
    // A write that reached the file but not the mark: written again.
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("{e}"));
    std::io::Write::write_all(&mut file, b"tick-6\npartial-").unwrap_or_else(|e| panic!("{e}"));
    drop(file);

    let (result, mark, text) = carried_on(second.as_ref(), &fx, "resumed", &path).await;
    assert_eq!(mark.running.as_ref().map(|r| r.name.as_str()), Some("slow"));
    let steps: Vec<_> = result
        .steps
        .iter()
        .map(|s| (s.name.as_str(), s.status, s.exit_code))
        .collect();
    assert_eq!(
        steps,
        [
            ("before", StepStatus::Success, Some(0)),
            ("slow", StepStatus::Success, Some(0)),
            ("after", StepStatus::Failed, Some(3)),
        ],
        "{text}"
    );
    assert_eq!(result.status, RunStatus::Failed, "{text}");
    assert_eq!(
        result.failure.as_ref().map(|f| f.kind),
        Some(FailureKind::Step)
    );
    assert!(text.contains("after-ran from-before"), "{text}");
    for stream in ["tick", "err"] {
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with(&format!("{stream}-")))
            .collect();
        let want: Vec<String> = (1..=60).map(|i| format!("{stream}-{i}")).collect();
        assert_eq!(lines, want, "every {stream} line once, in order:\n{text}");
    }
    // Its start is told once; the new runner says it carried it on.
    assert_eq!(text.matches("step slow: started").count(), 1, "{text}");
    assert_eq!(text.matches("step slow: carried on").count(), 1, "{text}");
    assert!(!text.contains("partial-"), "{text}");
    assert!(text.contains("after-ran"), "{text}");
    let seen = std::fs::read_to_string(fx.outputs().join("seen.txt"))
        .unwrap_or_else(|e| panic!("outputs: {e}\n{text}"));
    assert_eq!(seen, "before\n");
    assert_nothing_left(backend, &fx.runner).await;

    // The run is over: there is nothing to carry on.
    match bounded(second.reattach(&fx.runner, "resumed")).await {
        Err(ExecutorError::InvalidInput(msg)) => assert!(msg.contains("no live run"), "{msg}"),
        other => panic!("a finished run was found again: {other:?}"),
    }
    let (_, mark) = RunLog::resume(&path).unwrap_or_else(|e| panic!("{e}"));
    assert!(mark.run_finished);
}

/// A process an earlier step left, which waits for a runner to follow a
/// later step on (its follow's command line) and then writes `0` into
/// that step's status file and kills its supervisor. Where it finds no
/// step files (a backend without a state folder), it does nothing.
fn settles_a_followed_step() -> String {
    format!(
        r#"d=$(dirname "$0"); me=$PPID
( ls "$d"/stepio-*.pid > /dev/null 2>&1 || exit 0
  until grep -qs '_kd=[$]0; o=[$]1' /proc/[0-9]*/cmdline; do sleep 0.01; done
  for f in "$d"/stepio-*.pid; do
    p=; {{ read -r p _ < "$f"; }} 2>/dev/null
    [ -n "$p" ] && [ "$p" != "$me" ] && kill -0 "$p" && break
  done
{FORGES_AND_ENDS} ) > /dev/null 2>&1 &
echo left"#
    )
}

/// A step whose runner was killed is followed on by a new one
/// ([`Backend::another_runner`]), and a process an earlier step left
/// settles its status meanwhile (`settles_a_followed_step`): the new
/// runner takes only what the first one's start signed, as the first
/// would have, so the step is never a success. Listed as ignored where
/// runs do not outlive their runner (`another_runner`).
pub async fn a_left_process_cannot_settle_a_step_a_new_runner_follows(backend: &dyn Backend) {
    let Some(second) = backend.another_runner().await else {
        panic!(
            "this backend's runs do not outlive their runner: give conformance_tests! \
             `another_runner: \"why\"`"
        );
    };
    let fx = Fixture::new("settle-resumed");
    let spec = fx
        .spec(backend, "settle-resumed")
        .step(Step::new("leave", settles_a_followed_step()))
        .step(Step::new(
            "fails",
            "echo failing; i=0; while [ $i -lt 3000 ]; do sleep 0.01; i=$((i+1)); done; exit 1",
        ));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = dir.path().join("run.log");
    let log = RunLog::create_resumable(&path).unwrap_or_else(|e| panic!("{e}"));
    killed_once_printed(backend, &spec, &log, "failing\n").await;
    assert!(log.flush(PATIENCE).await, "the log never drained");
    drop(log);
    let (result, _, text) = carried_on(second.as_ref(), &fx, "settle-resumed", &path).await;
    assert_eq!(result.steps[0].status, StepStatus::Success, "{text}");
    let step = &result.steps[1];
    assert_ne!(step.status, StepStatus::Success, "{text}");
    assert_ne!(step.exit_code, Some(0), "{text}");
    if step.status == StepStatus::Error {
        let error = step.error.clone().unwrap_or_default();
        assert!(error.contains("not signed"), "{error}\n{text}");
    }
    assert_nothing_left(backend, &fx.runner).await;
}
