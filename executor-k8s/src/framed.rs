//! Ending a stream into an exec on `v4.channel.k8s.io`, which has no way
//! to close stdin but closing the connection (and losing the exit status).
//!
//! The stream goes in frames: a line with the frame's length, then that
//! many bytes; a `0` line ends it. In the pod a POSIX shell loop reads
//! each length with `read` and copies the frame with `dd iflag=fullblock`
//! (busybox and GNU dd both have it) in 64 KiB blocks, then the rest of
//! the frame, so the command behind the loop sees end of file after the
//! last frame, while stdin stays open. Frames are large (a few MiB), so
//! the loop costs a few hundred `dd` starts per GiB; the stream is packed
//! once and never measured first, and the next frame is filled while one
//! is sent. (`tar x` alone cannot be trusted to stop at the
//! end-of-archive marker: busybox's reads on to end of file.)

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

/// How much one frame holds at most.
pub const FRAME: usize = 4 << 20;

/// The loop that unframes stdin into `"$@"`'s stdin: a frame is copied
/// as its whole 64 KiB blocks, then one `dd` for the rest if any.
///
/// Why blocks and not one `dd bs=$n`: a `dd` whose block is the frame
/// allocates and faults in all 4 MiB of it, a fresh buffer per frame; a
/// 1 GiB checkout took 1.2 s longer than plain stdin in a busybox
/// container, and a pod under a tight memory limit paid 4 MiB a frame.
/// In 64 KiB blocks (a pipe's size) it costs what a `cat` in between
/// does.
macro_rules! unframe {
    () => {
        "while read -r n && [ \"$n\" -gt 0 ]; do \
         dd bs=65536 count=$((n >> 16)) iflag=fullblock 2>/dev/null || exit 1; \
         r=$((n & 65535)); [ \"$r\" = 0 ] || \
         dd bs=\"$r\" count=1 iflag=fullblock 2>/dev/null || exit 1; done | \"$@\""
    };
}

/// `sh -c` script: unframes stdin into `"$@"`'s stdin. Any `dd` failure
/// ends the loop early, which the command then sees as a truncated stream.
pub const UNFRAME: &str = unframe!();

/// `sh -c` script for a stream whose exec's protocol was not known when
/// its command was sent (the handshake that tells it answers the
/// command): the stream's first line says how the rest comes, [`PLAIN`]
/// (stdin then goes to `"$@"` as it is, and is closed at its end) or
/// [`FRAMED`] (as [`UNFRAME`] takes it). One exec either way, where the
/// first copy into a v4 pod used to learn the protocol from an exec it
/// then dropped: over a long link, a round trip or more before the first
/// step. `read` takes a line a byte at a time from a pipe, so `"$@"`
/// gets the stream from the byte after it.
pub const PLAIN_OR_FRAMED: &str = concat!(
    "read -r how || exit 1; [ \"$how\" != plain ] || exec \"$@\"; ",
    unframe!()
);

/// The first line of a [`PLAIN_OR_FRAMED`] stream sent as it is.
pub const PLAIN: &[u8] = b"plain\n";

/// The first line of a [`PLAIN_OR_FRAMED`] stream sent in frames.
pub const FRAMED: &[u8] = b"framed\n";

/// `inner` with `line` in front, sent in the same read as `inner`'s first
/// bytes: alone, it would be a small write that Nagle's algorithm holds
/// until the server acknowledges it (see [`Framed`]'s end mark).
pub struct Prefixed<R> {
    line: &'static [u8],
    inner: R,
}

impl<R> Prefixed<R> {
    /// `inner` after `line`.
    pub fn new(line: &'static [u8], inner: R) -> Self {
        Prefixed { line, inner }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Prefixed<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.line.is_empty() {
            return Pin::new(&mut this.inner).poll_read(cx, out);
        }
        let line = this.line.len();
        if out.remaining() <= line {
            let n = out.remaining();
            out.put_slice(&this.line[..n]);
            this.line = &this.line[n..];
            return Poll::Ready(Ok(()));
        }
        // Nothing is handed out until `inner` has something (or ended):
        // the line then goes with it.
        let unfilled = out.initialize_unfilled();
        let mut rest = ReadBuf::new(&mut unfilled[line..]);
        ready!(Pin::new(&mut this.inner).poll_read(cx, &mut rest))?;
        let got = rest.filled().len();
        unfilled[..line].copy_from_slice(this.line);
        out.advance(line + got);
        this.line = &[];
        Poll::Ready(Ok(()))
    }
}

/// Frames `inner` for [`UNFRAME`]. A task of its own fills the next
/// frame while this one is read and sent: filling (reading the files) and
/// sending overlap as they do on v5, where no frame is needed.
pub struct Framed {
    /// Frames with their length lines, and whether each is the last (the
    /// end mark's, which the last data frame carries at its end).
    frames: tokio::sync::mpsc::Receiver<io::Result<(Vec<u8>, bool)>>,
    filler: tokio::task::JoinHandle<()>,
    /// The frame being handed out (length line and body) and how much of it is out.
    current: Vec<u8>,
    sent: usize,
    done: bool,
}

/// The least an eager frame ([`Framed::eager`]) holds, but the last.
pub const EAGER_FRAME: usize = 256 << 10;

impl Framed {
    /// A framing reader over `inner`; must be called inside a Tokio runtime.
    pub fn new(inner: impl AsyncRead + Send + Unpin + 'static) -> Self {
        Framed::with_least(inner, FRAME)
    }

    /// As [`Framed::new`], but a frame goes as soon as it holds
    /// [`EAGER_FRAME`] bytes and nothing is queued to send: for a slow
    /// source (a compressor), whose first 4 MiB would otherwise keep the
    /// link idle while they are made.
    pub fn eager(inner: impl AsyncRead + Send + Unpin + 'static) -> Self {
        Framed::with_least(inner, EAGER_FRAME)
    }

    fn with_least(inner: impl AsyncRead + Send + Unpin + 'static, least: usize) -> Self {
        // One frame queued while one is sent: at most three in memory.
        let (tx, frames) = tokio::sync::mpsc::channel(1);
        let filler = tokio::spawn(fill(inner, tx, least));
        Framed {
            frames,
            filler,
            current: Vec::new(),
            sent: 0,
            done: false,
        }
    }
}

impl Drop for Framed {
    fn drop(&mut self) {
        self.filler.abort();
    }
}

/// Reads `inner` into frames, each with its length line in front; the
/// last data frame carries the end mark after it, in one piece: sent
/// apart, the mark is a second small write, which Nagle's algorithm on
/// the runner's connection holds until the server's delayed ACK of the
/// first (40 ms on Linux), and every copy in on v4 waited for it. An
/// error is passed on and ends the frames, so a failed source never
/// reaches the end mark.
async fn fill(
    mut inner: impl AsyncRead + Unpin,
    tx: tokio::sync::mpsc::Sender<io::Result<(Vec<u8>, bool)>>,
    least: usize,
) {
    use tokio::io::AsyncReadExt;
    loop {
        let mut frame = Vec::with_capacity(FRAME + 16);
        // Full frames, but one of at least `least` bytes goes once
        // nothing is queued: the sender would otherwise wait for it.
        // The frame's length, and whether the source ended with it.
        let read = loop {
            let mut body = (&mut inner).take((FRAME - frame.len()) as u64);
            match body.read_buf(&mut frame).await {
                Ok(0) => break Ok((frame.len(), true)),
                Ok(_) if frame.len() >= FRAME => break Ok((frame.len(), false)),
                Ok(_) if frame.len() >= least && tx.capacity() == tx.max_capacity() => {
                    break Ok((frame.len(), false))
                }
                Ok(_) => {}
                Err(err) => break Err(err),
            }
        };
        let (got, last) = match read {
            Ok(read) => read,
            Err(err) => {
                let _ = tx.send(Err(err)).await;
                return;
            }
        };
        let mut out = Vec::with_capacity(got + 24);
        if got > 0 {
            out.extend_from_slice(format!("{got}\n").as_bytes());
            out.append(&mut frame);
        }
        if last {
            out.extend_from_slice(END);
        }
        if tx.send(Ok((out, last))).await.is_err() || last {
            return;
        }
    }
}

impl AsyncRead for Framed {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        while this.sent == this.current.len() {
            if this.done {
                return Poll::Ready(Ok(()));
            }
            match ready!(this.frames.poll_recv(cx)) {
                Some(Ok((frame, last))) => {
                    this.done = last;
                    this.current = frame;
                    this.sent = 0;
                }
                Some(Err(err)) => return Poll::Ready(Err(err)),
                None => {
                    return Poll::Ready(Err(io::Error::other(
                        "the stream's framing task ended before its end mark",
                    )))
                }
            }
        }
        let n = (this.current.len() - this.sent).min(out.remaining());
        out.put_slice(&this.current[this.sent..this.sent + n]);
        this.sent += n;
        Poll::Ready(Ok(()))
    }
}

const END: &[u8] = b"0\n";

#[cfg(test)]
mod tests;
