//! Steps outlive the connections that carry them.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use executor_core::events::{Event, OutputStream};
use executor_core::{run, MemoryLog, RunLog, RunStatus, Step, StepStatus};
use tokio_util::sync::CancellationToken;

use crate::fixture::{assert_nothing_left, assert_valid_result, bounded, Fixture};
use crate::Backend;

/// A step whose output stream is cut twice (mid-line, once in the first
/// exec and once in the one that follows it) still ends with its own exit
/// code, and the log has every byte of its stdout and stderr once, in
/// order. A backend with no stream to cut ([`Backend::cut_streams_after`])
/// lists it as ignored (`cut_streams` in [`conformance_tests!`](crate::conformance_tests)).
pub async fn a_step_cut_twice_keeps_every_byte_and_its_code(backend: &dyn Backend) {
    let fx = Fixture::new("cut-twice");
    // 4000 numbered lines (about 40 KB), a few on stderr, then a failure
    // of the step's own: its code must survive the cuts.
    let spec = fx.spec(backend, "cut-twice").step(Step::new(
        "talk",
        "i=0; while [ $i -lt 4000 ]; do echo \"line $i of the step\"; \
             [ $((i % 1000)) = 0 ] && echo \"err $i\" >&2; i=$((i+1)); done; \
             exit 7",
    ));
    assert!(
        backend.cut_streams_after(&[10_001, 9_999]).await,
        "this backend cannot cut a step's streams: give conformance_tests! `cut_streams: \"why\"`"
    );
    let text = MemoryLog::default();
    let log = RunLog::new(text.clone());
    let outputs = Arc::new(Mutex::new((Vec::new(), Vec::new())));
    let seen = outputs.clone();
    log.add_sink(Arc::new(move |event: &Event| {
        if let Event::Output {
            step: Some(step),
            stream,
            ..
        } = event
        {
            if step != "talk" {
                return;
            }
            let bytes = event.output_bytes().unwrap_or_default();
            let mut both = seen.lock().unwrap_or_else(|p| p.into_inner());
            match stream {
                OutputStream::Stdout => both.0.extend_from_slice(bytes),
                OutputStream::Stderr => both.1.extend_from_slice(bytes),
            }
        }
    }));
    let result = bounded(run(
        backend.executor(),
        &spec,
        &log,
        CancellationToken::new(),
    ))
    .await;
    assert!(
        log.flush(Duration::from_secs(30)).await,
        "the log never drained"
    );
    let text = text.text();
    assert_valid_result(&result);
    assert_eq!(result.steps[0].status, StepStatus::Failed, "{text}");
    assert_eq!(result.steps[0].exit_code, Some(7), "{text}");
    assert_eq!(result.status, RunStatus::Failed, "{text}");
    let (out, err) = outputs.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let want_out: String = (0..4000)
        .map(|i| format!("line {i} of the step\n"))
        .collect();
    let want_err: String = (0..4).map(|i| format!("err {}\n", i * 1000)).collect();
    assert!(
        String::from_utf8_lossy(&out) == want_out,
        "stdout is not every line once, in order ({} bytes of {}):\n{text}",
        out.len(),
        want_out.len()
    );
    assert_eq!(String::from_utf8_lossy(&err), want_err, "{text}");
    assert_eq!(
        text.matches("the step's stream broke").count(),
        2,
        "two cuts, each followed:\n{text}"
    );
    assert_nothing_left(backend, &fx.runner).await;
}
