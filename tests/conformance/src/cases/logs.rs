//! The run log: streamed while steps run, in order, without buffering.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use executor_core::events::{Event, OutputStream};
use executor_core::{run, MemoryLog, RunLog, RunStatus, Step, StepStatus};
use tokio_util::sync::CancellationToken;

use crate::fixture::{
    assert_nothing_left, assert_valid_result, bounded, rss, run_to_end, run_watched, Fixture,
    WatchedLog,
};
use crate::Backend;

/// Output reaches the log while the step is still running, in the order
/// written, with start and end markers around each step.
///
/// The step prints, then blocks; the case waits for the text in the log and
/// only then cancels the run. A backend that buffered output until the step
/// ended would never show it, and the case would fail.
pub async fn logs_stream_while_step_runs(backend: &dyn Backend) {
    let fx = Fixture::new("logstream");
    let spec = fx
        .spec(backend, "log-stream")
        .step(Step::new("first", "echo from-first-step"))
        .step(Step::new(
            "chatty",
            "echo line-one; echo to-stderr >&2; echo line-two; echo line-three; exec sleep 600",
        ));
    let log = WatchedLog::default();
    let cancel = CancellationToken::new();
    let run = run_watched(backend, &spec, &log, cancel.clone());
    let observe = async {
        // stdout and stderr are separate pipes: neither orders the other.
        log.wait_for("line-three").await;
        log.wait_for("to-stderr").await;
        cancel.cancel();
    };
    let (result, ()) = tokio::join!(run, observe);
    assert_eq!(result.status, RunStatus::Cancelled, "{}", log.text());
    let text = log.text();
    let at = |needle: &str| {
        text.find(needle)
            .unwrap_or_else(|| panic!("{needle:?} is not in the log:\n{text}"))
    };
    assert!(at("==> step first: started") < at("from-first-step"));
    assert!(at("from-first-step") < at("==> step first: success (exit 0"));
    assert!(at("==> step chatty: started") < at("line-one"));
    assert!(at("line-one") < at("line-two") && at("line-two") < at("line-three"));
    assert!(text.contains("to-stderr"));
    assert!(at("line-three") < at("==> step chatty: cancelled"));
    assert_nothing_left(backend, &fx.runner).await;
}

/// A step that leaves a process holding its output (a server started in
/// the background, without its own redirections) has ended when its
/// shell has: with its own code, and with every byte it wrote before it
/// ended in the log. What it wrote last is on its way through the
/// environment's pipes when its shell ends; several such steps make a
/// lost last line likely where one is lost at all.
///
/// The container backends' copier sends on what the step's pipes hold
/// once it has ended, before the end marks (see `executor_container`'s
/// `detached` scripts); with the image's `tee` instead (another
/// architecture) a last line can still be lost, as it was on the v4 test
/// cluster before the copier (`out-0-last` missing).
pub async fn a_step_that_leaves_a_process_holding_its_output_ends_with_all_it_wrote(
    backend: &dyn Backend,
) {
    const STEPS: usize = 6;
    let fx = Fixture::new("leftover");
    let mut spec = fx.spec(backend, "leftover");
    for i in 0..STEPS {
        spec = spec.step(
            Step::new(
                format!("leaves{i}"),
                format!("sleep 7394 & echo out-{i}-last; echo err-{i}-last >&2; exit {i}"),
            )
            .continue_on_error(true),
        );
    }
    let spec = spec.step(Step::new("next", "echo next-step-ran"));
    let (result, log) = run_to_end(backend, &spec).await;
    let text = log.text();
    for i in 0..STEPS {
        assert_eq!(result.steps[i].exit_code, Some(i as i32), "{text}");
        for line in [format!("out-{i}-last\n"), format!("err-{i}-last\n")] {
            assert!(text.contains(&line), "{line:?} is not in the log:\n{text}");
        }
    }
    assert!(text.contains("next-step-ran\n"), "{text}");
    assert_nothing_left(backend, &fx.runner).await;
}

/// A step printing 200 MB streams it through: every byte arrives, in
/// pieces, and this process's memory does not grow with it.
pub async fn large_log_is_streamed(backend: &dyn Backend) {
    const BYTES: u64 = 200_000_000;
    let fx = Fixture::new("biglog");
    let spec = fx.spec(backend, "big-log").step(Step::new(
        "flood",
        format!("yes 0123456789abcdefghijklmnopqrstuvwxyz-0123456789abcdefghijklmnopqrstuvwxyz | head -c {BYTES}"),
    ));
    let before = rss().unwrap_or(0);
    let log = WatchedLog::with_output_limit(None);
    let result = run_watched(backend, &spec, &log, CancellationToken::new()).await;
    assert_eq!(result.status, RunStatus::Success, "{}", result.to_json());
    assert!(
        log.total() >= BYTES,
        "only {} bytes reached the log",
        log.total()
    );
    assert!(
        log.largest_write() <= 4 << 20,
        "one write of {} bytes: output was buffered",
        log.largest_write()
    );
    let growth = log.max_rss().saturating_sub(before);
    assert!(
        growth < 128 << 20,
        "memory grew by {} MiB while streaming {} MB of log",
        growth >> 20,
        BYTES / 1_000_000
    );
    assert_nothing_left(backend, &fx.runner).await;
}

/// A step printing past the log's limit: the log keeps the limit's worth
/// and says once that the rest is dropped, the step runs to its own end,
/// the next step runs, and the result counts every dropped byte.
pub async fn a_loud_step_is_cut_at_the_log_limit(backend: &dyn Backend) {
    // Under the megabyte the watched log keeps, so its last line shows.
    const LIMIT: u64 = 256 << 10;
    const BYTES: u64 = 1_000_000;
    let fx = Fixture::new("loglimit");
    let spec = fx
        .spec(backend, "log-limit")
        .step(Step::new(
            "loud",
            format!("yes 0123456789 | head -c {BYTES}; echo done > loud-done"),
        ))
        .step(Step::new("next", "test -f loud-done; echo next-ran"));
    let log = WatchedLog::with_output_limit(Some(LIMIT));
    let result = run_watched(backend, &spec, &log, CancellationToken::new()).await;
    assert_valid_result(&result);
    assert_eq!(result.status, RunStatus::Success, "{}", result.to_json());
    assert_eq!(result.steps[0].output_dropped_bytes, BYTES - LIMIT);
    assert_eq!(
        result.steps[1].output_dropped_bytes,
        "next-ran\n".len() as u64
    );
    let text = log.text();
    assert_eq!(
        text.matches("more output is dropped").count(),
        1,
        "{}",
        &text[text.len().saturating_sub(2000)..]
    );
    // The limit's worth of output, and the runner's own lines.
    assert!(
        log.total() < LIMIT + (16 << 10),
        "the log holds {} bytes",
        log.total()
    );
    assert!(
        text.contains("==> step loud: success (exit 0, ")
            && text.contains("720.6 KiB of output dropped)"),
        "{}",
        &text[text.len().saturating_sub(2000)..]
    );
    assert_nothing_left(backend, &fx.runner).await;
}

/// Each step's end marker carries its exit code and duration.
pub async fn step_markers_carry_exit_codes(backend: &dyn Backend) {
    let fx = Fixture::new("markers");
    let spec = fx
        .spec(backend, "markers")
        .step(Step::new("boom", "exit 5"));
    let (result, log) = run_to_end(backend, &spec).await;
    assert_eq!(result.steps[0].status, StepStatus::Failed);
    assert!(
        log.text().contains("==> step boom: failed (exit 5, "),
        "{}",
        log.text()
    );
    assert_nothing_left(backend, &fx.runner).await;
}

/// The run's events arrive in the order of the run, each step's output
/// tagged with its step and stream, and say what the result says: the
/// run, its environment, each step's start, its output, its end with
/// status and exit code, the outputs, the result. Sinks are called from
/// the log's writer thread, as an embedder's would be.
pub async fn events_follow_the_run(backend: &dyn Backend) {
    let fx = Fixture::new("events");
    let spec = fx
        .spec(backend, "events")
        .step(Step::new(
            "speak",
            "echo to-out; echo to-err >&2; printf 'gr\\303\\274\\303\\237e\\n'",
        ))
        .step(Step::new("fail", "echo failing; exit 3"))
        .step(Step::new("never", "echo never"));
    let text = MemoryLog::default();
    let log = RunLog::new(text.clone());
    let events = Arc::new(Mutex::new(Vec::new()));
    let seen = events.clone();
    log.add_sink(Arc::new(move |event: &Event| {
        seen.lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(event.clone());
    }));
    let result = bounded(run(
        backend.executor(),
        &spec,
        &log,
        CancellationToken::new(),
    ))
    .await;
    assert_valid_result(&result);
    assert!(
        log.flush(Duration::from_secs(30)).await,
        "the log never drained"
    );
    let events = events.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let text = text.text();

    let outline: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            Event::RunStarted { name, .. } => Some(format!("run {name}")),
            Event::EnvironmentReady { attempt, .. } => Some(format!("ready {attempt}")),
            Event::StepStarted { step, index, .. } => Some(format!("start {index} {step}")),
            Event::StepFinished {
                step,
                status,
                exit_code,
                ..
            } => Some(format!("end {step} {} {exit_code:?}", status.as_str())),
            Event::OutputsCollected { failure, .. } => {
                Some(format!("outputs {}", failure.is_none()))
            }
            Event::RunFinished { result, .. } => {
                Some(format!("finished {}", result.status.as_str()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        outline,
        [
            "run events",
            "ready 1",
            "start 0 speak",
            "end speak success Some(0)",
            "start 1 fail",
            "end fail failed Some(3)",
            "outputs true",
            "finished failed",
        ],
        "{text}"
    );
    let said = |step: &str, stream: OutputStream| -> String {
        events
            .iter()
            .filter_map(|e| match e {
                Event::Output {
                    step: Some(s),
                    stream: st,
                    ..
                } if s == step && *st == stream => e.output_bytes(),
                _ => None,
            })
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .collect()
    };
    assert_eq!(
        said("speak", OutputStream::Stdout),
        "to-out\ngrüße\n",
        "{text}"
    );
    assert_eq!(said("speak", OutputStream::Stderr), "to-err\n", "{text}");
    assert_eq!(said("fail", OutputStream::Stdout), "failing\n", "{text}");
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, Event::Output { step: None, .. })),
        "output outside a step: {events:?}"
    );
    // Output comes between its step's start and end.
    let place = |want: &dyn Fn(&Event) -> bool| {
        events
            .iter()
            .position(want)
            .unwrap_or_else(|| panic!("missing event in {events:?}"))
    };
    let speak_ends = place(&|e| matches!(e, Event::StepFinished { step, .. } if step == "speak"));
    let last_speak_output = events
        .iter()
        .rposition(|e| matches!(e, Event::Output { step: Some(s), .. } if s == "speak"))
        .unwrap_or(0);
    assert!(last_speak_output < speak_ends, "{events:?}");
    match events.last() {
        Some(Event::RunFinished { result: told, .. }) => assert_eq!(**told, result),
        other => panic!("the last event is not the result: {other:?}"),
    }
    // The text log is a view of the same run.
    for line in [
        "==> step speak: started",
        "to-err",
        "grüße",
        "==> step fail: failed (exit 3, ",
        "==> run events: failed",
    ] {
        assert!(text.contains(line), "{line:?} is not in the log:\n{text}");
    }
    let first = serde_json::to_value(&events[0]).unwrap_or_default();
    assert_eq!(first["event"], "runStarted", "{first}");
    assert_nothing_left(backend, &fx.runner).await;
}
