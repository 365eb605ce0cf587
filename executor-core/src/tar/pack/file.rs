//! One regular file into the archive, read in large pieces and held to
//! the size its header says.

use std::io;
use std::path::Path;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, DuplexStream, ReadBuf};
use tokio_tar::{Builder, Header, HeaderMode};

use super::small::shrank;

/// How much of a file one read takes.
const READ_BUF: usize = 1024 * 1024;

/// Runs filesystem work on the blocking pool.
pub(super) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|join| io::Error::other(format!("tar packer failed: {join}")))?
}

/// Appends one regular file, read in large pieces: every tokio file read
/// is a trip to the blocking pool, and the builder's own copy asks for
/// 8 KiB at a time. The header's size is the opened file's; a file that
/// shrinks while it is packed is an error, never a short entry.
pub(super) async fn append_file(
    builder: &mut Builder<DuplexStream>,
    abs: &Path,
    rel: &Path,
) -> io::Result<()> {
    // Never follow a link that replaced the file since it was listed.
    let file = tokio::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(abs)
        .await?;
    let meta = file.metadata().await?;
    let mut header = Header::new_gnu();
    header.set_metadata_in_mode(&meta, HeaderMode::Complete);
    let data = SizedReader {
        inner: tokio::io::BufReader::with_capacity(READ_BUF, file).take(meta.len()),
        remaining: meta.len(),
    };
    builder.append_data(&mut header, rel, data).await
}

/// Ends with an error, not quietly, when `inner` runs out before
/// `remaining` bytes: a shrinking file. (`take` cuts a growing one at the
/// size its header promised.)
pub(super) struct SizedReader<R> {
    pub(super) inner: R,
    pub(super) remaining: u64,
}

impl<R: AsyncRead + Unpin> AsyncRead for SizedReader<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        ready!(Pin::new(&mut self.inner).poll_read(cx, buf))?;
        let got = (buf.filled().len() - before) as u64;
        if got == 0 && buf.remaining() > 0 && self.remaining > 0 {
            return Poll::Ready(Err(shrank(self.remaining)));
        }
        self.remaining = self.remaining.saturating_sub(got);
        Poll::Ready(Ok(()))
    }
}
