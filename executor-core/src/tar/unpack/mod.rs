//! The untrusted unpacker: a tar stream from an environment into a host
//! folder, with nothing written outside it.
//!
//! The stream is parsed on the caller's task ([`read`]) and every
//! filesystem write happens in order on one blocking thread ([`write`]),
//! fed batches of work through a bounded queue.

mod read;
mod record;
mod write;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::io::AsyncRead;
use tokio::sync::mpsc;

use read::read_entries;
use write::Writer;

/// Bytes of file contents gathered before they go to the writer.
const CHUNK: usize = 256 << 10;
/// Operations sent to the writer together: one queue trip (and thread
/// wake-up) per batch, not per operation, so a small file costs a few
/// syscalls rather than three hand-offs between threads.
const BATCH_OPS: usize = 256;
/// Batches queued for the writer; a batch holds less than two [`CHUNK`]s
/// of contents, so at most 8 MiB is in flight, whatever the archive's size.
const QUEUE: usize = 16;
/// How many refused entries a summary names; the rest are only counted, so
/// a stream of a million bad entries cannot grow the runner's memory.
const REFUSED_NAMED: usize = 100;

/// The largest extension header (GNU long name or long link, PAX record
/// set) read: a path is at most a few KiB on any real filesystem, and the
/// header is held in memory, so its declared size is never trusted.
pub const MAX_EXTENSION_BYTES: u64 = 64 << 10;

/// Caps on what an untrusted stream may write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnpackLimits {
    /// Total bytes read from the stream for file contents, extension
    /// headers and anything after the end-of-archive marker.
    pub max_bytes: u64,
    /// Number of things created: entries, and the folders their paths
    /// imply.
    pub max_entries: u64,
    /// Leading path components to drop from every entry, as `tar --strip-components`.
    pub strip_components: usize,
}

impl Default for UnpackLimits {
    /// 10 GiB and 1,000,000 entries, nothing stripped.
    fn default() -> Self {
        UnpackLimits {
            max_bytes: 10 << 30,
            max_entries: 1_000_000,
            strip_components: 0,
        }
    }
}

/// One entry the unpacker skipped, and why; the result JSON lists the
/// outputs refused this way.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RefusedEntry {
    /// The entry's path as the archive gave it (lossy UTF-8, control
    /// characters replaced).
    pub path: String,
    /// Why it was refused, e.g. `fifo entries are not allowed`.
    pub reason: String,
}

/// What [`unpack_untrusted`] wrote, and what it refused.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnpackSummary {
    /// Regular files and hard links written.
    pub files: u64,
    /// Folders created.
    pub dirs: u64,
    /// Symlinks created.
    pub symlinks: u64,
    /// Bytes of file contents written.
    pub bytes: u64,
    /// The first entries refused (at most 100), in archive order.
    pub refused: Vec<RefusedEntry>,
    /// How many entries were refused in all.
    pub refused_count: u64,
}

impl UnpackSummary {
    /// Whether every entry of the stream was written.
    pub fn is_whole(&self) -> bool {
        self.refused_count == 0
    }

    fn refuse(&mut self, path: &str, reason: String) {
        self.refused_count = self.refused_count.saturating_add(1);
        if self.refused.len() < REFUSED_NAMED {
            self.refused.push(RefusedEntry {
                path: crate::text::one_line(path, 1024),
                reason,
            });
        }
    }
}

/// Why an untrusted tar stream was refused as a whole.
///
/// An entry that cannot be written safely (an escaping path or link, a
/// device, a fifo) does not fail the stream: it is skipped and named in
/// [`UnpackSummary::refused`]. These errors are for streams that cannot be
/// trusted to go on: too big, malformed, or using headers that are never
/// parsed.
#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    /// An entry whose structure cannot be parsed safely (sparse files,
    /// unknown header kinds, PAX size records).
    #[error("refused tar stream at entry {entry:?}: {kind} headers are not allowed")]
    Forbidden {
        /// The entry's path.
        entry: String,
        /// Its kind.
        kind: &'static str,
    },
    /// An extension header (long name, long link, PAX) declares more than
    /// [`MAX_EXTENSION_BYTES`].
    #[error(
        "refused tar stream: a {kind} header declares {size} bytes (at most {limit} are read)"
    )]
    ExtensionTooLarge {
        /// The header's kind.
        kind: &'static str,
        /// Its declared size.
        size: u64,
        /// The cap.
        limit: u64,
    },
    /// The stream is larger than allowed.
    #[error("tar stream holds more than {limit} bytes; refused (raise the limit or write fewer outputs)")]
    TooLarge {
        /// The byte limit.
        limit: u64,
    },
    /// The stream has too many entries.
    #[error("tar stream holds more than {limit} entries; refused (raise the limit or write fewer outputs)")]
    TooManyEntries {
        /// The entry limit.
        limit: u64,
    },
    /// The stream is not a valid tar, it broke off, its producer failed,
    /// or a host write failed.
    #[error("unpacking tar into {}: {source}", dest.display())]
    Io {
        /// The destination folder.
        dest: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

/// Unpacks a tar stream from an untrusted source into `dest`.
///
/// Skipped, named in [`UnpackSummary::refused`], with nothing written
/// outside `dest`: absolute paths and `..`; symlinks whose target is
/// absolute or, followed through the links already unpacked, leaves
/// `dest`; a symlink where an earlier link's target passes through (it
/// would move where that link points); hard links to anything but a
/// regular file already unpacked; any entry whose parent folder is a
/// symlink (so nothing is written *through* a link); devices and fifos.
///
/// The whole stream is refused with an error when it holds more than
/// `limits` allow, an extension header larger than
/// [`MAX_EXTENSION_BYTES`], a sparse file or a header kind it does not
/// know. The stream is always read to its true end, past the end-of-archive
/// marker: a producer that failed after writing a short, well-formed
/// archive fails the unpack too, never passes for a whole one.
///
/// Modes keep only the permission bits (no setuid, setgid or sticky);
/// ownership is not applied. Entries already written stay when the stream
/// is refused; callers that need all-or-nothing unpack into a fresh folder
/// and discard it.
///
/// When this future ends, the writer has stopped; when it is dropped, the
/// writer stops after its current entry. Memory stays bounded whatever the
/// stream declares.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use executor_core::tar::{pack_dir, unpack_untrusted, UnpackLimits};
/// let (src, dst) = (tempfile::tempdir()?, tempfile::tempdir()?);
/// std::fs::write(src.path().join("a.txt"), "hi")?;
/// let summary = unpack_untrusted(pack_dir(src.path()), dst.path(), UnpackLimits::default()).await?;
/// assert_eq!(summary.files, 1);
/// assert!(summary.is_whole());
/// assert_eq!(std::fs::read_to_string(dst.path().join("a.txt"))?, "hi");
/// # Ok(()) }
/// ```
///
/// # Errors
/// [`UnpackError`] for a stream refused as a whole: past `limits`
/// (`TooLarge`, `TooManyEntries`), a header kind that is never parsed
/// (`Forbidden`), an extension header past its cap (`ExtensionTooLarge`),
/// or a stream that is not tar, broke or ended early, or `dest` that could
/// not be written (`Io`). Entries refused one by one are not errors: they
/// are named in the summary.
pub async fn unpack_untrusted<R: AsyncRead + Unpin>(
    reader: R,
    dest: &Path,
    limits: UnpackLimits,
) -> Result<UnpackSummary, UnpackError> {
    let (ops, queue) = mpsc::channel(QUEUE);
    let stop = Arc::new(AtomicBool::new(false));
    let writer = Writer::new(dest, limits.max_entries, stop.clone());
    let writing = tokio::task::spawn_blocking(move || writer.run(queue));
    // Dropping this future (a cancelled unpack) stops the writer too.
    let stop_on_drop = StopOnDrop(stop);
    let mut ops = Batcher {
        queue: ops,
        batch: Vec::new(),
        bytes: 0,
    };
    let mut read = read_entries(reader, dest, limits, &mut ops).await;
    // What was checked before a refusal is still written, as documented.
    if let Err(ReadEnd::WriterGone) = ops.flush().await {
        read = read.and(Err(ReadEnd::WriterGone));
    }
    drop(ops);
    let written = match writing.await {
        Ok(written) => written,
        Err(join) => Err(UnpackError::Io {
            dest: dest.to_path_buf(),
            source: io::Error::other(format!("the unpack writer failed: {join}")),
        }),
    };
    drop(stop_on_drop);
    match (read, written) {
        // The writer's own error explains a queue that closed under the reader.
        (Err(ReadEnd::WriterGone), written) => written,
        (Err(ReadEnd::Refused(err)), _) => Err(err),
        (Ok(()), written) => written,
    }
}

struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Why the reader stopped early.
enum ReadEnd {
    /// The stream was refused.
    Refused(UnpackError),
    /// The writer stopped taking work (it failed; its error says why).
    WriterGone,
}

impl From<UnpackError> for ReadEnd {
    fn from(err: UnpackError) -> Self {
        ReadEnd::Refused(err)
    }
}

/// Filesystem work for the writer, in archive order.
enum Op {
    /// The archive's own root folder: the destination exists.
    Root,
    Dir {
        rel: PathBuf,
        raw: String,
    },
    File {
        rel: PathBuf,
        raw: String,
        mode: u32,
    },
    Data(Vec<u8>),
    EndFile,
    Symlink {
        rel: PathBuf,
        raw: String,
        link: PathBuf,
    },
    HardLink {
        rel: PathBuf,
        raw: String,
        source: PathBuf,
        shown: String,
    },
    /// An entry the reader refused; the writer records it in order.
    Refused {
        raw: String,
        reason: String,
    },
}

/// Gathers operations into batches for the writer.
struct Batcher {
    queue: mpsc::Sender<Vec<Op>>,
    batch: Vec<Op>,
    /// Bytes of file contents in `batch`.
    bytes: usize,
}

impl Batcher {
    async fn send(&mut self, op: Op) -> Result<(), ReadEnd> {
        if let Op::Data(data) = &op {
            self.bytes += data.len();
        }
        self.batch.push(op);
        if self.batch.len() >= BATCH_OPS || self.bytes >= CHUNK {
            self.flush().await?;
        }
        Ok(())
    }

    async fn flush(&mut self) -> Result<(), ReadEnd> {
        if self.batch.is_empty() {
            return Ok(());
        }
        self.bytes = 0;
        let batch = std::mem::take(&mut self.batch);
        self.queue
            .send(batch)
            .await
            .map_err(|_| ReadEnd::WriterGone)
    }
}
