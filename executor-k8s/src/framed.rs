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
//! first. (`tar x` alone cannot be trusted to stop at the end-of-archive
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

/// Frames `inner` for [`UNFRAME`].
pub struct Framed<R> {
    inner: R,
    /// FRAME bytes once the first read comes; `filled` of them hold data.
    frame: Vec<u8>,
    filled: usize,
    header: Vec<u8>,
    /// Bytes of the current frame (header and body) already handed out.
    sent: usize,
    source_done: bool,
    state: State,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Filling,
    Sending,
    /// Handing out the end mark; bytes of it already handed out.
    Ending(usize),
    Done,
}

const END: &[u8] = b"0\n";

impl<R> Framed<R> {
    /// A framing reader over `inner`.
    pub fn new(inner: R) -> Self {
        Framed {
            inner,
            frame: Vec::new(),
            filled: 0,
            header: Vec::new(),
            sent: 0,
            source_done: false,
            state: State::Filling,
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Framed<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            match this.state {
                State::Filling => {
                    if this.frame.len() < FRAME {
                        this.frame = vec![0; FRAME];
                    }
                    let mut buf = ReadBuf::new(&mut this.frame[this.filled..]);
                    ready!(Pin::new(&mut this.inner).poll_read(cx, &mut buf))?;
                    let got = buf.filled().len();
                    this.filled += got;
                    if got == 0 {
                        this.source_done = true;
                    }
                    if this.source_done || this.filled == FRAME {
                        if this.filled == 0 {
                            this.state = State::Ending(0);
                        } else {
                            this.header = format!("{}\n", this.filled).into_bytes();
                            this.sent = 0;
                            this.state = State::Sending;
                        }
                    }
                }
                State::Sending => {
                    let total = this.header.len() + this.filled;
                    if this.sent == total {
                        this.filled = 0;
                        this.state = if this.source_done {
                            State::Ending(0)
                        } else {
                            State::Filling
                        };
                        continue;
                    }
                    let (src, at) = if this.sent < this.header.len() {
                        (&this.header[..], this.sent)
                    } else {
                        (&this.frame[..this.filled], this.sent - this.header.len())
                    };
                    let n = (src.len() - at).min(out.remaining());
                    out.put_slice(&src[at..at + n]);
                    this.sent += n;
                    return Poll::Ready(Ok(()));
                }
                State::Ending(at) => {
                    let n = (END.len() - at).min(out.remaining());
                    out.put_slice(&END[at..at + n]);
                    this.state = if at + n == END.len() {
                        State::Done
                    } else {
                        State::Ending(at + n)
                    };
                    return Poll::Ready(Ok(()));
                }
                State::Done => return Poll::Ready(Ok(())),
            }
        }
    }
}

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
            Framed::new(&data[..])
                .read_to_end(&mut framed)
                .await
                .unwrap();
            assert_eq!(unframe(&framed), data, "size {size}");
            assert!(framed.ends_with(b"0\n"));
        }
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

    fn tokio_test_reader() -> impl AsyncRead + Unpin {
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
}
