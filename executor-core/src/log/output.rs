//! Step output into a run log: what writes it (a step's output stream),
//! how it is masked, guarded, limited and stamped on its way, and the
//! memory a test's log goes to.

use std::io::{self, Write};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};

use tokio::io::AsyncWrite;
use tokio_util::sync::PollSemaphore;

use super::stamps::stamped;
use super::writer::budget_permits;
use super::{Inner, RunLog, LOG_BUDGET};
use crate::events::{Event, OutputStream};
use crate::mask::MaskStream;

/// An `AsyncWrite` into a run log's step output; see [`RunLog::writer`].
pub struct LogOutput {
    pub(super) log: RunLog,
    pub(super) budget: Option<PollSemaphore>,
    pub(super) stream: OutputStream,
}

impl AsyncWrite for LogOutput {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let piece = &buf[..buf.len().min(LOG_BUDGET)];
        let permits = budget_permits(piece);
        if let Some(budget) = self.budget.as_mut() {
            if let Some(taken) = ready!(budget.poll_acquire_many(cx, permits)) {
                taken.forget();
            }
        }
        self.log.write_output(self.stream, piece, permits);
        Poll::Ready(Ok(piece.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
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

impl RunLog {
    /// Writes step output as it came, but for masked secrets; a tail that
    /// could still be a secret is held until the next chunk, line or end.
    /// Waits while 1 MiB of output is already on its way to a slow
    /// destination.
    pub async fn output(&self, bytes: &[u8]) {
        self.output_from(OutputStream::Stdout, bytes).await;
    }

    /// [`RunLog::output`] from one of the step's streams: the text log
    /// shows both alike, events say which.
    pub async fn output_from(&self, stream: OutputStream, bytes: &[u8]) {
        for piece in bytes.chunks(LOG_BUDGET) {
            let permits = budget_permits(piece);
            if let Some(budget) = &self.budget {
                // Never closed; if it were, writing on would still be right.
                if let Ok(taken) = budget.acquire_many(permits).await {
                    taken.forget();
                }
            }
            self.write_output(stream, piece, permits);
        }
    }

    pub(super) fn write_output(&self, stream: OutputStream, bytes: &[u8], permits: u32) {
        let reached = self.write_admitted(stream, bytes, permits);
        if reached {
            self.limit_reached();
        }
    }

    /// Writes what the limit admits of `bytes`; whether the limit was
    /// reached just now.
    fn write_admitted(&self, stream: OutputStream, bytes: &[u8], permits: u32) -> bool {
        let mut inner = self.lock();
        // Dropped bytes still count as taken: a resumed run carries on
        // after them, not from them.
        let taken_len = bytes.len();
        let (keep, reached) = inner.limit.admit(bytes.len());
        let bytes = &bytes[..keep];
        let Inner {
            dest,
            masks,
            masked,
            guard,
            guarded,
            at_line_start,
            failed,
            sinks,
            step,
            stamps,
            marking,
            taken,
            guarded_stream,
            limit: _,
            reword: _,
            step_key: _,
            usage: _,
            signing: _,
        } = &mut *inner;
        let unmasked = match masks.as_mut().map(|m| &mut m[stream as usize]) {
            Some(mask) => {
                masked.clear();
                mask.push(bytes, masked);
                masked.as_slice()
            }
            None => bytes,
        };
        let event = (!sinks.is_empty() && !unmasked.is_empty())
            .then(|| Event::output(step.clone(), stream, unmasked));
        guarded.clear();
        guard.push(unmasked, guarded);
        if guard.is_holding() {
            *guarded_stream = stream;
        }
        let holding = guard.is_holding()
            || masks
                .as_ref()
                .is_some_and(|m| m.iter().any(MaskStream::is_holding));
        if holding {
            *at_line_start = false;
        } else if !guarded.is_empty() {
            *at_line_start = guarded.ends_with(b"\n");
        }
        let text = stamped(stamps, guarded, time::OffsetDateTime::now_utc);
        let i = stream as usize;
        taken[i] = taken[i].saturating_add(taken_len as u64);
        // What the log holds of each stream: all taken but what the
        // masker and the line guard still hold (bytes as they came).
        let committed = marking.then(|| {
            let mut held = [0u64; 2];
            if let Some(masks) = masks.as_ref() {
                for (h, m) in held.iter_mut().zip(masks.iter()) {
                    *h = m.held_len() as u64;
                }
            }
            let g = *guarded_stream as usize;
            held[g] = held[g].saturating_add(guard.held_len() as u64);
            [
                taken[0].saturating_sub(held[0]),
                taken[1].saturating_sub(held[1]),
            ]
        });
        match event {
            // The event releases the budget: it is handled after the text,
            // so a slow sink holds output back as a slow log does.
            Some(event) => {
                dest.write_marked(text, 0, committed, failed);
                inner.send_event(event, permits);
            }
            None => dest.write_marked(text, permits, committed, failed),
        }
        reached
    }
}
