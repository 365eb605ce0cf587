//! The mark that begins each stream of a step's exec, and the writer that
//! holds back what comes before it.
//!
//! An engine that cannot start an exec may say so in the exec's own
//! stream: Docker writes `OCI runtime exec failed: ...` there and ends the
//! exec with 126, for instance when the container has no pid left. Those
//! bytes are not the step's, and counting them would move the offsets a
//! follow goes on from, past bytes of the step's that the log would then
//! never have. So a start and a follow write [`BEGIN_MARK`] first, with
//! the shell's own error output sent nowhere, and only what comes after
//! the mark goes on as the step's output.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::AsyncWrite;

use executor_core::text::HeadBuffer;

/// The first bytes of both streams of a start or a follow, once its shell
/// runs: a NUL first, as in an end mark ([`super::end_mark`]).
pub const BEGIN_MARK: &[u8] = b"\0knotless-step-begin\n";

/// How much of what came before the mark is kept to be told.
const TOLD: usize = 4096;

/// Passes a stream on to `inner` from the first [`BEGIN_MARK`] on; what
/// came before it is kept (its first 4 KiB) as the environment's words.
pub(super) struct Begun<W> {
    inner: W,
    /// Whether the mark has come.
    begun: bool,
    /// Bytes before the mark that may still be its start.
    window: Vec<u8>,
    /// Bytes before the mark, certainly not part of it.
    before: HeadBuffer,
    /// Output after the mark, taken but not yet written to `inner`.
    pending: Vec<u8>,
}

/// How a stream began: whether the mark came, what came before it, and
/// the writer after it.
pub(super) struct Beginning<W> {
    pub(super) begun: bool,
    pub(super) before: String,
    pub(super) inner: W,
}

impl<W: AsyncWrite + Unpin> Begun<W> {
    pub(super) fn new(inner: W) -> Self {
        Begun {
            inner,
            begun: false,
            window: Vec::new(),
            before: HeadBuffer::new(TOLD),
            pending: Vec::new(),
        }
    }

    /// The stream has ended. Output after the mark that is still pending
    /// is written on first.
    pub(super) async fn finish(mut self) -> std::io::Result<Beginning<W>> {
        use tokio::io::AsyncWriteExt;
        let pending = std::mem::take(&mut self.pending);
        self.inner.write_all(&pending).await?;
        let mut before = self.before;
        if !self.begun {
            before.keep(&self.window);
        }
        Ok(Beginning {
            begun: self.begun,
            before: before.text(),
            inner: self.inner,
        })
    }

    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        super::end_mark::poll_pending(&mut self.inner, &mut self.pending, cx)
    }

    /// Takes `buf` while the mark has not come: keeps what may be its
    /// start, tells the rest, and queues what follows the mark.
    fn look_for_mark(&mut self, buf: &[u8]) {
        self.window.extend_from_slice(buf);
        if let Some(at) = find(&self.window, BEGIN_MARK) {
            self.keep_before(at);
            self.begun = true;
            self.pending = self.window.split_off(BEGIN_MARK.len());
            self.window = Vec::new();
            return;
        }
        let keep = partial_tail(&self.window);
        let settled = self.window.len().saturating_sub(keep);
        self.keep_before(settled);
    }

    /// Moves the first `n` bytes of the window to what came before.
    fn keep_before(&mut self, n: usize) {
        let rest = self.window.split_off(n);
        let told = std::mem::replace(&mut self.window, rest);
        self.before.keep(&told);
    }
}

/// Where `needle` first is in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// How many bytes at the end of `bytes` may be the mark's start.
fn partial_tail(bytes: &[u8]) -> usize {
    super::end_mark::tail_starting(bytes, BEGIN_MARK.len(), |tail| BEGIN_MARK.starts_with(tail))
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Begun<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = &mut *self;
        std::task::ready!(this.poll_pending(cx))?;
        if this.begun {
            return Pin::new(&mut this.inner).poll_write(cx, buf);
        }
        this.look_for_mark(buf);
        // Taken: what is pending is written before anything after it.
        if let Poll::Ready(Err(err)) = this.poll_pending(cx) {
            return Poll::Ready(Err(err));
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        match this.poll_pending(cx) {
            Poll::Ready(Ok(())) => Pin::new(&mut this.inner).poll_flush(cx),
            other => other,
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        match this.poll_pending(cx) {
            Poll::Ready(Ok(())) => Pin::new(&mut this.inner).poll_shutdown(cx),
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// Writes `pieces` through a `Begun`: what went on, whether it began,
    /// and what came before the mark.
    async fn through(pieces: &[&[u8]]) -> (Vec<u8>, bool, String) {
        let mut begun = Begun::new(Vec::new());
        for piece in pieces {
            begun
                .write_all(piece)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let ended = begun.finish().await.unwrap_or_else(|e| panic!("{e}"));
        (ended.inner, ended.begun, ended.before)
    }

    #[tokio::test]
    async fn only_what_follows_the_mark_goes_on() {
        let (out, begun, before) = through(&[b"\0knotless-step-begin\nhello\n"]).await;
        assert_eq!(
            (out.as_slice(), begun, before.as_str()),
            (&b"hello\n"[..], true, "")
        );
    }

    #[tokio::test]
    async fn an_engines_words_before_the_mark_are_told_not_passed_on() {
        let (out, begun, before) =
            through(&[b"OCI runtime exec failed\n", b"\0knotless-step-begin\nok"]).await;
        assert_eq!(out, b"ok");
        assert!(begun);
        assert_eq!(before, "OCI runtime exec failed");
    }

    #[tokio::test]
    async fn a_mark_split_over_every_byte_is_found() {
        let all = b"x\0knotless-step-begin\n\0data\0";
        let pieces: Vec<&[u8]> = all.chunks(1).collect();
        let (out, begun, before) = through(&pieces).await;
        assert_eq!(
            (out.as_slice(), begun, before.as_str()),
            (&b"\0data\0"[..], true, "x")
        );
    }

    #[tokio::test]
    async fn a_stream_without_the_mark_passes_nothing_on() {
        let (out, begun, before) = through(&[b"\0knotless-step-beg"]).await;
        assert!(out.is_empty());
        assert!(!begun);
        assert!(before.contains("knotless-step-beg"), "{before:?}");
    }

    #[tokio::test]
    async fn what_comes_before_the_mark_is_kept_to_4_kib() {
        let noise = vec![b'n'; 100_000];
        let (out, begun, before) = through(&[&noise, BEGIN_MARK, b"y"]).await;
        assert_eq!((out.as_slice(), begun), (&b"y"[..], true));
        assert!(before.ends_with("(95904 more bytes)"), "{before}");
    }
}
