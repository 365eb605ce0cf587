//! A run outlives its runner process.

use std::sync::Arc;

use executor_core::events::Event;
use executor_core::resume::resume_with;
use executor_core::{
    run_with, DriverOptions, ExecutorError, FailureKind, RunLog, RunStatus, Step, StepStatus,
};
use tokio_util::sync::CancellationToken;

use crate::fixture::{assert_nothing_left, assert_valid_result, bounded, Fixture, PATIENCE};
use crate::Backend;

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
        .step(Step::new("before", "echo before > before.txt"))
        .step(Step::new(
            "slow",
            // The step's own pace: 60 ticks a tenth of a second apart, so
            // it is still running when the runner dies at the fifth.
            "i=1; while [ $i -le 60 ]; do echo tick-$i; echo err-$i >&2; \
             sleep 0.1; i=$((i+1)); done; cat before.txt > \"$OUTPUTS_DIR/seen.txt\"",
        ))
        .step(Step::new("after", "echo after-ran; exit 3"));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = dir.path().join("run.log");
    let log = RunLog::create_resumable(&path).unwrap_or_else(|e| panic!("{e}"));
    let (seen_tx, mut seen) = tokio::sync::watch::channel(false);
    log.add_sink(Arc::new(move |event: &Event| {
        if event
            .output_bytes()
            .is_some_and(|b| String::from_utf8_lossy(b).contains("tick-5\n"))
        {
            seen_tx.send_replace(true);
        }
    }));
    let first = {
        let log = log.clone();
        let spec = spec.clone();
        let executor = backend.executor();
        async move {
            run_with(
                executor,
                &spec,
                &log,
                CancellationToken::new(),
                &DriverOptions::default(),
            )
            .await
        }
    };
    // The runner dies at the fifth tick: its run is dropped mid-step.
    tokio::select! {
        _ = first => panic!("the run ended before the runner was killed"),
        waited = tokio::time::timeout(PATIENCE, seen.wait_for(|s| *s)) => {
            assert!(matches!(waited, Ok(Ok(_))), "the step never printed tick-5");
        }
    }
    assert!(log.flush(PATIENCE).await, "the log never drained");
    drop(log);
    // A write that reached the file but not the mark: written again.
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("{e}"));
    std::io::Write::write_all(&mut file, b"tick-6\npartial-").unwrap_or_else(|e| panic!("{e}"));
    drop(file);

    let live = bounded(second.reattach(&fx.runner, "resumed"))
        .await
        .unwrap_or_else(|e| panic!("reattach: {e}"));
    assert_eq!(live.plan.steps.len(), 3);
    let again = live
        .plan
        .clone()
        .into_spec(fx.outputs(), Vec::new())
        .unwrap_or_else(|e| panic!("{e}"));
    let (log, mark) = RunLog::resume(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(mark.running.as_ref().map(|r| r.name.as_str()), Some("slow"));
    let result = bounded(resume_with(
        second.as_ref(),
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
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_valid_result(&result);
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
