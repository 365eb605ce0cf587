//! The run log: one byte stream that every step's output goes to as it arrives.

use std::fs::File;
use std::io::{self, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The single log of a run.
///
/// Step output is written through as it arrives, unbuffered, so a reader of
/// the log file (or the terminal, with `--log -`) sees it while the step
/// runs. The runner's own lines start with `==> ` and always begin on a
/// fresh line, so they are easy to tell apart from step output.
///
/// Cloning is cheap: every clone writes to the same destination.
///
/// ```
/// use executor_core::RunLog;
/// let (log, captured) = RunLog::memory();
/// log.step_started("build");
/// log.output(b"compiling\n");
/// assert!(captured.text().contains("compiling"));
/// ```
#[derive(Clone)]
pub struct RunLog {
    inner: Arc<Mutex<Inner>>,
}

struct Inner {
    out: Box<dyn Write + Send>,
    at_line_start: bool,
    failed: bool,
}

impl std::fmt::Debug for RunLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunLog").finish_non_exhaustive()
    }
}

impl RunLog {
    /// A log writing to any writer.
    pub fn new(out: impl Write + Send + 'static) -> Self {
        RunLog {
            inner: Arc::new(Mutex::new(Inner {
                out: Box::new(out),
                at_line_start: true,
                failed: false,
            })),
        }
    }

    /// A log written to `path`, created or truncated.
    pub fn create(path: &Path) -> io::Result<Self> {
        Ok(Self::new(File::create(path)?))
    }

    /// A log written to standard output (`--log -`).
    pub fn stdout() -> Self {
        Self::new(io::stdout())
    }

    /// A log that discards everything.
    pub fn discard() -> Self {
        Self::new(io::sink())
    }

    /// A log kept in memory, for tests and examples; the second value reads it.
    pub fn memory() -> (Self, MemoryLog) {
        let buf = MemoryLog::default();
        (Self::new(buf.clone()), buf)
    }

    /// Writes step output exactly as it came.
    pub fn output(&self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        self.with(|inner| {
            let r = inner.out.write_all(bytes).and_then(|_| inner.out.flush());
            inner.at_line_start = bytes.ends_with(b"\n");
            r
        });
    }

    /// Writes one runner line (`==> message`), starting on a fresh line.
    pub fn line(&self, message: &str) {
        self.with(|inner| {
            let lead = if inner.at_line_start { "" } else { "\n" };
            let r = writeln!(inner.out, "{lead}==> {message}").and_then(|_| inner.out.flush());
            inner.at_line_start = true;
            r
        });
    }

    /// Marks the start of a step.
    pub fn step_started(&self, name: &str) {
        self.line(&format!("step {name}: started"));
    }

    /// Marks the end of a step with its status, exit code and duration.
    pub fn step_finished(&self, name: &str, status: &str, exit_code: Option<i32>, took: Duration) {
        let code = exit_code.map_or_else(|| "no exit code".to_string(), |c| format!("exit {c}"));
        self.line(&format!(
            "step {name}: {status} ({code}, {:.3}s)",
            took.as_secs_f64()
        ));
    }

    fn with(&self, f: impl FnOnce(&mut Inner) -> io::Result<()>) {
        // A poisoned lock only means another writer panicked mid-write;
        // the log is still usable.
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(err) = f(&mut inner) {
            if !inner.failed {
                inner.failed = true;
                tracing::warn!(%err, "run log write failed; further log output may be lost");
            }
        }
    }
}

/// An in-memory log destination; see [`RunLog::memory`].
#[derive(Clone, Default)]
pub struct MemoryLog(Arc<Mutex<Vec<u8>>>);

impl MemoryLog {
    /// Everything written so far, lossily decoded.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    }
}

impl Write for MemoryLog {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runner_lines_start_on_a_fresh_line() {
        let (log, mem) = RunLog::memory();
        log.output(b"no newline");
        log.step_finished("a", "success", Some(0), Duration::from_millis(1500));
        assert_eq!(
            mem.text(),
            "no newline\n==> step a: success (exit 0, 1.500s)\n"
        );
    }
}
