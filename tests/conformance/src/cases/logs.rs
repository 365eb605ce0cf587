//! The run log: streamed while steps run, in order, without buffering.

use executor_core::{RunStatus, Step, StepStatus};
use tokio_util::sync::CancellationToken;

use crate::fixture::{assert_nothing_left, rss, run_to_end, run_watched, Fixture, WatchedLog};
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
    let (result, log) = run_to_end(backend, &spec).await;
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
