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

    /// What `PLAIN_OR_FRAMED` hands `cat`, run by this machine's `sh`.
    fn through_the_script(stdin: &[u8]) -> (bool, Vec<u8>) {
        through_the_script_with(stdin, &std::env::var("PATH").unwrap())
    }

    /// [`through_the_script`] with `path` as the script's `PATH`.
    fn through_the_script_with(stdin: &[u8], path: &str) -> (bool, Vec<u8>) {
        use std::io::Write;
        let mut child = std::process::Command::new("sh")
            .args(["-c", PLAIN_OR_FRAMED, "sh", "cat"])
            .env("PATH", path)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Written from a thread: the output is read as it comes.
        let (mut pipe, input) = (child.stdin.take().unwrap(), stdin.to_vec());
        let writer = std::thread::spawn(move || pipe.write_all(&input));
        let out = child.wait_with_output().unwrap();
        let _ = writer.join().unwrap();
        (out.status.success(), out.stdout)
    }

    /// Each frame goes through whole, and no `dd` of the loop holds a
    /// block larger than a pipe's 64 KiB: a frame-sized block cost the
    /// pod 4 MiB of fresh memory per frame (a `dd` on `PATH` before the
    /// real one notes each block size).
    #[tokio::test]
    async fn frames_are_copied_in_pipe_sized_blocks() {
        let real = std::process::Command::new("sh")
            .args(["-c", "command -v dd"])
            .output()
            .unwrap();
        let real = String::from_utf8(real.stdout).unwrap().trim().to_string();
        let dir = tempfile::tempdir().unwrap();
        let noted = dir.path().join("blocks");
        let fake = dir.path().join("dd");
        std::fs::write(
            &fake,
            format!(
                "#!/bin/sh\nfor a; do case $a in bs=*) echo \"${{a#bs=}}\" >> '{}';; esac; done\nexec '{real}' \"$@\"\n",
                noted.display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = format!(
            "{}:{}",
            dir.path().display(),
            std::env::var("PATH").unwrap()
        );
        for size in [1, 65535, 65536, 65537, 3 * 65536 + 5, FRAME, FRAME + 1] {
            let data: Vec<u8> = (0..size).map(|i| (i % 249) as u8).collect();
            let mut framed = Vec::new();
            Prefixed::new(FRAMED, Framed::new(std::io::Cursor::new(data.clone())))
                .read_to_end(&mut framed)
                .await
                .unwrap();
            let _ = std::fs::remove_file(&noted);
            assert_eq!(
                through_the_script_with(&framed, &path),
                (true, data),
                "size {size}"
            );
            let blocks = std::fs::read_to_string(&noted).unwrap();
            for block in blocks.lines() {
                let block: usize = block.parse().unwrap();
                assert!(
                    block <= 65536,
                    "a dd of {block} bytes for a stream of {size}"
                );
            }
        }
    }

    #[tokio::test]
    async fn the_first_line_says_how_the_stream_comes() {
        let data: Vec<u8> = (0..300_000).map(|i| (i % 253) as u8).collect();
        let mut plain = Vec::new();
        Prefixed::new(PLAIN, std::io::Cursor::new(data.clone()))
            .read_to_end(&mut plain)
            .await
            .unwrap();
        assert_eq!(through_the_script(&plain), (true, data.clone()));
        let mut framed = Vec::new();
        Prefixed::new(FRAMED, Framed::new(std::io::Cursor::new(data.clone())))
            .read_to_end(&mut framed)
            .await
            .unwrap();
        // Bytes after the end mark are never read: stdin stays open on v4.
        framed.extend_from_slice(b"what comes after");
        assert_eq!(through_the_script(&framed), (true, data));
        assert_eq!(through_the_script(b""), (false, Vec::new()), "no line");
    }

    /// The line goes out with the stream's first bytes, not alone (a
    /// small write Nagle's algorithm would hold), and nothing goes out
    /// before the stream has something.
    #[tokio::test]
    async fn the_line_goes_with_the_first_bytes() {
        use tokio::io::AsyncWriteExt;
        let (mut source, rest) = tokio::io::duplex(1 << 16);
        let mut prefixed = Prefixed::new(PLAIN, rest);
        let mut buf = vec![0u8; 1 << 16];
        use futures_util::FutureExt;
        let early = prefixed.read(&mut buf).now_or_never();
        assert!(early.is_none(), "the line went alone: {early:?}");
        source.write_all(b"tar").await.unwrap();
        let n = prefixed.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"plain\ntar");
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
