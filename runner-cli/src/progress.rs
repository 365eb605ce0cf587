//! The run's progress on the terminal when its log goes to a file: the
//! log's own runner lines (`==> step build: success (exit 0, 1.2s)`), so
//! a run with `--log FILE` (which `resume` needs) is not silent.

use std::io::Write as _;
use std::sync::Arc;

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
