//! Where a run log's bytes go: written inline, or by a thread of its own
//! that also tells the sinks and keeps the mark.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

use super::{Inner, RunLog, Sinks};
use crate::events::{Event, EventSink};
use crate::resume::mark::MarkFile;

pub(super) enum Dest {
    Inline(Box<dyn Write + Send>),
    Thread {
        to_writer: mpsc::Sender<Message>,
        written: Arc<AtomicU64>,
    },
}

pub(super) enum Message {
    /// Bytes to write, the budget permits they release once written, and
    /// the running step's bytes of stdout and stderr the log holds with them.
    Write(Vec<u8>, u32, Option<[u64; 2]>),
    /// An event for the sinks, and the budget permits it releases.
    Event(Box<Event>, Sinks, u32),
    /// Answered once everything before it is written (or failed).
    Flushed(tokio::sync::oneshot::Sender<()>),
    /// The environment's statuses must be signed: answered once the mark
    /// says so.
    Signed(tokio::sync::oneshot::Sender<()>),
}

impl Dest {
    pub(super) fn write(&mut self, bytes: Vec<u8>, permits: u32, failed: &mut bool) {
        self.write_marked(bytes, permits, None, failed);
    }

    pub(super) fn write_marked(
        &mut self,
        bytes: Vec<u8>,
        permits: u32,
        committed: Option<[u64; 2]>,
        failed: &mut bool,
    ) {
        match self {
            Dest::Inline(out) => {
                if let Err(err) = out.write_all(&bytes).and_then(|()| out.flush()) {
                    if !*failed {
                        *failed = true;
                        tracing::warn!(%err, "run log write failed; further log output may be lost");
                    }
                }
            }
            Dest::Thread { to_writer, .. } => {
                // The thread only ends when every sender is gone.
                let _ = to_writer.send(Message::Write(bytes, permits, committed));
            }
        }
    }
}

pub(super) fn budget_permits(piece: &[u8]) -> u32 {
    // A piece is at most LOG_BUDGET bytes, far below u32::MAX.
    u32::try_from(piece.len()).unwrap_or(u32::MAX)
}

/// The writer thread: writes what it is sent, in order, and gives the
/// budget back as bytes leave. After a failed write it discards the rest
/// (still giving the budget back, so no step waits on a dead log).
pub(super) fn write_all_sent(
    out: &mut Box<dyn Write + Send>,
    from_runner: &mpsc::Receiver<Message>,
    written: &AtomicU64,
    budget: &Semaphore,
    mut mark: Option<MarkFile>,
) {
    let mut failed = false;
    loop {
        let message = match from_runner.try_recv() {
            Ok(message) => message,
            Err(mpsc::TryRecvError::Empty) => {
                // Nothing waiting: the mark catches up with the log once
                // per burst of writes, not once per write.
                save_mark(&mut mark);
                match from_runner.recv() {
                    Ok(message) => message,
                    Err(_) => break,
                }
            }
            Err(mpsc::TryRecvError::Disconnected) => break,
        };
        match message {
            Message::Event(event, sinks, permits) => {
                tell(&sinks, &event);
                if let Some(mark) = mark.as_mut() {
                    mark.event(&event);
                }
                if permits > 0 {
                    budget.add_permits(permits as usize);
                }
            }
            Message::Write(bytes, permits, committed) => {
                if !failed {
                    if let Err(err) = out.write_all(&bytes).and_then(|()| out.flush()) {
                        failed = true;
                        // The mark stays at the last byte surely written.
                        mark = None;
                        tracing::warn!(%err, "run log write failed; further log output is lost");
                    } else if let Some(mark) = mark.as_mut() {
                        mark.wrote(&bytes, committed);
                    }
                }
                let len = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
                written.fetch_add(len.max(1), Ordering::Relaxed);
                if permits > 0 {
                    budget.add_permits(permits as usize);
                }
            }
            Message::Flushed(answer) => {
                save_mark(&mut mark);
                let _ = answer.send(());
            }
            Message::Signed(answer) => {
                if let Some(mark) = mark.as_mut() {
                    mark.signed();
                }
                save_mark(&mut mark);
                let _ = answer.send(());
            }
        }
    }
    save_mark(&mut mark);
}

pub(super) fn save_mark(mark: &mut Option<MarkFile>) {
    if let Some(file) = mark.as_mut() {
        if let Err(err) = file.save() {
            tracing::warn!(%err, "the run log's mark could not be written; the run cannot be resumed from here on");
            *mark = None;
        }
    }
}

/// Gives `event` to every sink; a sink that panics loses that event, not
/// the log (a dead writer thread would hold every step's output back).
pub(super) fn tell(sinks: &[Arc<dyn EventSink>], event: &Event) {
    for sink in sinks {
        let told = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sink.event(event)));
        if told.is_err() {
            tracing::warn!("an event sink panicked; it missed one event");
        }
    }
}

impl RunLog {
    /// Waits until everything logged so far is written. Gives up, returning
    /// `false`, when the destination takes no byte for `patience` (a
    /// reader that stopped reading); a slow one that keeps taking bytes is
    /// waited for.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let path = std::env::temp_dir().join(format!("flush-demo-{}.log", std::process::id()));
    /// let log = executor_core::RunLog::create(&path).unwrap();
    /// log.line("hello");
    /// assert!(log.flush(std::time::Duration::from_secs(5)).await);
    /// assert_eq!(std::fs::read_to_string(&path).unwrap(), "==> hello\n");
    /// # std::fs::remove_file(&path).unwrap();
    /// # }
    /// ```
    pub async fn flush(&self, patience: Duration) -> bool {
        let (done, mut flushed) = tokio::sync::oneshot::channel();
        let written = {
            let mut inner = self.lock();
            inner.release_held();
            match &mut inner.dest {
                Dest::Inline(out) => return out.flush().is_ok(),
                Dest::Thread { to_writer, written } => {
                    if to_writer.send(Message::Flushed(done)).is_err() {
                        return false;
                    }
                    written.clone()
                }
            }
        };
        let mut seen = written.load(Ordering::Relaxed);
        loop {
            match tokio::time::timeout(patience, &mut flushed).await {
                Ok(answer) => return answer.is_ok(),
                Err(_) => {
                    let now = written.load(Ordering::Relaxed);
                    if now == seen {
                        return false;
                    }
                    seen = now;
                }
            }
        }
    }
}

impl Inner {
    /// Hands `event` to the sinks (through the writer thread when there is
    /// one), and with it `permits` of the output budget.
    pub(super) fn send_event(&self, event: Event, permits: u32) {
        match &self.dest {
            // An inline log has no budget to give back.
            Dest::Inline(_) => tell(&self.sinks, &event),
            Dest::Thread { to_writer, .. } => {
                let sinks = self.sinks.clone();
                // The thread only ends when every sender is gone.
                let _ = to_writer.send(Message::Event(Box::new(event), sinks, permits));
            }
        }
    }
}
