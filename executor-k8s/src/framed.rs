//! Ending a stream into an exec on `v4.channel.k8s.io`, which has no way
//! to close stdin but closing the connection (and losing the exit status).
//!
//! The stream goes in frames: a line with the frame's length, then that
//! many bytes; a `0` line ends it. In the pod a POSIX shell loop reads
//! each length with `read` and copies the frame with one
//! `dd iflag=fullblock` (busybox and GNU dd both have it), so the command
//! behind the loop sees end of file after the last frame, while stdin
//! stays open. Frames are large (a few MiB), so the loop costs a handful
//! of `dd` starts per GiB; the stream is packed once and never measured
//! first, and the next frame is filled while one is sent. (`tar x` alone cannot be trusted to stop at the end-of-archive
//! marker: busybox's reads on to end of file.)

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

/// How much one frame holds at most.
pub const FRAME: usize = 4 << 20;

/// `sh -c` script: unframes stdin into `"$@"`'s stdin. Any `dd` failure
/// ends the loop early, which the command then sees as a truncated stream.
pub const UNFRAME: &str = "while read -r n && [ \"$n\" -gt 0 ]; do \
     dd bs=\"$n\" count=1 iflag=fullblock 2>/dev/null || exit 1; done | \"$@\"";

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
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;

    /// What `UNFRAME` does in the pod, done here: lengths and bodies.
    fn unframe(mut framed: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let line_end = framed.iter().position(|&b| b == b'\n').unwrap();
            let n: usize = std::str::from_utf8(&framed[..line_end])
                .unwrap()
                .parse()
                .unwrap();
            framed = &framed[line_end + 1..];
            if n == 0 {
                assert!(framed.is_empty(), "bytes after the end mark");
                return out;
            }
            out.extend_from_slice(&framed[..n]);
            framed = &framed[n..];
        }
    }

    #[tokio::test]
    async fn any_stream_comes_through_whole_and_ends_with_the_mark() {
        for size in [0, 1, 4096, FRAME - 1, FRAME, FRAME + 1, 3 * FRAME + 12345] {
            let data: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
            let mut framed = Vec::new();
            Framed::new(std::io::Cursor::new(data.clone()))
                .read_to_end(&mut framed)
                .await
                .unwrap();
            assert_eq!(unframe(&framed), data, "size {size}");
            assert!(framed.ends_with(b"0\n"));
        }
    }

    /// A short stream, a checkout of an empty folder, goes in one read
    /// with its end mark: two writes in a row would wait for the
    /// server's delayed ACK.
    #[tokio::test]
    async fn the_last_frame_and_the_end_mark_are_one_piece() {
        let mut framed = Framed::new(std::io::Cursor::new(b"abc".to_vec()));
        let mut buf = vec![0u8; 1 << 16];
        let n = framed.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"3\nabc0\n");
        assert_eq!(framed.read(&mut buf).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn a_failing_source_fails_the_stream_instead_of_ending_it() {
        let failing = tokio_test_reader();
        let mut framed = Vec::new();
        let err = Framed::new(failing)
            .read_to_end(&mut framed)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::Other);
        assert!(!framed.ends_with(b"0\n"));
    }

    fn tokio_test_reader() -> impl AsyncRead + Send + Unpin + 'static {
        use tokio::io::AsyncReadExt as _;
        (&b"some bytes"[..]).chain(FailingRead)
    }

    struct FailingRead;
    impl AsyncRead for FailingRead {
        fn poll_read(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            _: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            Poll::Ready(Err(io::Error::other("the packer failed")))
        }
    }
    /// An eager frame goes once it holds enough and nothing is queued,
    /// though the source has not ended: a compressor's first bytes reach
    /// the link at once.
    #[tokio::test]
    async fn an_eager_frame_goes_before_the_source_ends() {
        use tokio::io::AsyncWriteExt;
        let (mut source, rest) = tokio::io::duplex(1 << 20);
        source.write_all(&vec![7u8; 300 << 10]).await.unwrap();
        let mut framed = Framed::eager(rest);
        let mut line = Vec::new();
        let first = tokio::time::timeout(std::time::Duration::from_secs(10), async {
            let mut byte = [0u8; 1];
            loop {
                framed.read_exact(&mut byte).await.unwrap();
                if byte[0] == b'\n' {
                    break;
                }
                line.push(byte[0]);
            }
        })
        .await;
        assert!(first.is_ok(), "no frame before the source ended");
        let n: usize = String::from_utf8(line).unwrap().parse().unwrap();
        assert!((EAGER_FRAME..FRAME).contains(&n), "{n}");
        drop(source);
    }
}
