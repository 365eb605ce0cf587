//! The run log: one byte stream that every step's output goes to as it arrives.

use std::fs::File;
use std::io::{self, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::mask::{MaskStream, Masker};

/// The single log of a run.
///
/// Step output is written through as it arrives, unbuffered, so a reader of
/// the log file (or the terminal, with `--log -`) sees it while the step
/// runs. The runner's own lines start with `==> ` and always begin on a
/// fresh line, so they are easy to tell apart from step output.
///
/// Once [`RunLog::mask`] is given a run's secrets (the driver does it
/// when a run has any), every byte of step output and every runner line
/// goes through one [`MaskStream`], so a value split across chunks is
/// still masked; see [`crate::mask`].
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
    mask: Option<MaskStream>,
    masked: Vec<u8>,
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
                mask: None,
                masked: Vec::new(),
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

    /// From now on, masks the values `masker` knows (as well as any it
    /// was given before) in everything written.
    ///
    /// ```
    /// use executor_core::{mask::{Masker, Secret}, RunLog};
    /// let (log, captured) = RunLog::memory();
    /// log.mask(&Masker::new([&Secret::new("hunter22")]));
    /// log.output(b"pw=hun");
    /// log.output(b"ter22\n");
    /// log.line("done with hunter22");
    /// assert_eq!(captured.text(), "pw=[MASKED]\n==> done with [MASKED]\n");
    /// ```
    pub fn mask(&self, masker: &Masker) {
        if masker.is_empty() {
            return;
        }
        self.with(|inner| {
            let r = inner.release_held();
            let combined = match &inner.mask {
                Some(stream) => stream.masker().union(masker),
                None => masker.clone(),
            };
            inner.mask = Some(combined.stream());
            r
        });
    }

    /// Writes step output as it came, but for masked secrets; a tail that
    /// could still be a secret is held until the next chunk, line or end.
    pub fn output(&self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        self.with(|inner| {
            let Some(stream) = inner.mask.as_mut() else {
                let r = inner.out.write_all(bytes).and_then(|_| inner.out.flush());
                inner.at_line_start = bytes.ends_with(b"\n");
                return r;
            };
            inner.masked.clear();
            stream.push(bytes, &mut inner.masked);
            let holding = stream.is_holding();
            let Inner { out, masked, .. } = &mut *inner;
            let r = out.write_all(masked).and_then(|_| out.flush());
            if holding {
                inner.at_line_start = false;
            } else if !inner.masked.is_empty() {
                inner.at_line_start = inner.masked.ends_with(b"\n");
            }
            r
        });
    }

    /// Writes one runner line (`==> message`), starting on a fresh line.
    pub fn line(&self, message: &str) {
        self.with(|inner| {
            let held = inner.release_held();
            let message = match &inner.mask {
                Some(stream) => stream.masker().mask_str(message).into_owned(),
                None => message.to_string(),
            };
            let lead = if inner.at_line_start { "" } else { "\n" };
            let r = writeln!(inner.out, "{lead}==> {message}").and_then(|_| inner.out.flush());
            inner.at_line_start = true;
            held.and(r)
        });
    }

    /// Writes out what the masker held back: the output it belonged to is
    /// over (a step ended, or the runner speaks next).
    pub fn end_output(&self) {
        self.with(Inner::release_held);
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

impl Inner {
    fn release_held(&mut self) -> io::Result<()> {
        let Some(stream) = self.mask.as_mut() else {
            return Ok(());
        };
        if !stream.is_holding() {
            return Ok(());
        }
        self.masked.clear();
        stream.flush(&mut self.masked);
        self.at_line_start = self.masked.ends_with(b"\n");
        self.out
            .write_all(&self.masked)
            .and_then(|_| self.out.flush())
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
