//! The run's progress on the terminal when its log goes to a file: the
//! log's own runner lines (`==> step build: success (exit 0, 1.2s)`), so
//! a run with `--log FILE` (which `resume` needs) is not silent.

use std::future::Future;
use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

use executor_core::events::{Event, EventSink};

/// Most characters of one progress line; the log file has the whole line.
const MAX_CHARS: usize = 2000;

/// A sink that writes each event's runner line to stderr. The log has
/// masked it already; control characters are escaped, so nothing a step
/// named can move the terminal's cursor.
pub(crate) fn on_stderr() -> Arc<dyn EventSink> {
    Arc::new(|event: &Event| {
        if let Some(line) = event.line() {
            let line = executor_core::text::one_line(&line, MAX_CHARS);
            let _ = writeln!(std::io::stderr(), "==> {line}");
        }
    })
}

/// How long a wait goes unremarked, then how often it is remarked on.
const FIRST_REMARK: Duration = Duration::from_secs(3);
const REMARK_EVERY: Duration = Duration::from_secs(10);

/// `waiting` to its end, with a line on stderr after 3 s and every 10 s
/// after that while `who` has not answered: an endpoint that accepts a
/// connection and never answers must not look like a hung runner.
pub(crate) async fn while_waiting<T>(who: &str, waiting: impl Future<Output = T>) -> T {
    let started = tokio::time::Instant::now();
    let mut remark = tokio::time::interval_at(started + FIRST_REMARK, REMARK_EVERY);
    tokio::pin!(waiting);
    loop {
        tokio::select! {
            done = &mut waiting => return done,
            _ = remark.tick() => say!(
                "runner-cli: still waiting for {who} to answer ({}s so far); Ctrl-C cancels",
                started.elapsed().as_secs()
            ),
        }
    }
}
