use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures_util::StreamExt;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::mpsc;
use tokio_tar::{Archive, EntryType};

/// Bytes of file contents gathered before they go to the writer.
const CHUNK: usize = 256 << 10;
/// Operations sent to the writer together: one queue trip (and thread
/// wake-up) per batch, not per operation, so a small file costs a few
/// syscalls rather than three hand-offs between threads.
const BATCH_OPS: usize = 256;
/// Batches queued for the writer; a batch holds less than two [`CHUNK`]s
/// of contents, so at most 8 MiB is in flight, whatever the archive's size.
const QUEUE: usize = 16;

/// Caps on what an untrusted stream may write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnpackLimits {
    /// Total bytes of file contents.
    pub max_bytes: u64,
    /// Number of entries of any kind.
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

/// What [`unpack_untrusted`] wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UnpackSummary {
    /// Regular files and hard links written.
    pub files: u64,
    /// Folders created.
    pub dirs: u64,
    /// Symlinks created.
    pub symlinks: u64,
    /// Bytes of file contents written.
    pub bytes: u64,
}

/// Why an untrusted tar stream was refused.
#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    /// An entry would land outside the destination or write through a link.
    #[error("refused tar entry {entry:?}: {reason}")]
    Escape {
        /// The entry's path as given in the archive.
        entry: String,
        /// What it tried.
        reason: String,
    },
    /// An entry of a kind that is never unpacked (device, fifo, sparse).
    #[error("refused tar entry {entry:?}: {kind} entries are not allowed")]
    Forbidden {
        /// The entry's path.
        entry: String,
        /// Its kind.
        kind: &'static str,
    },
    /// The stream is larger than allowed.
    #[error("tar stream holds more than {limit} bytes of files; refused (raise the limit or write fewer outputs)")]
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
    /// The stream is not a valid tar, or a host write failed.
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
/// Refused, with nothing written outside `dest`: absolute paths and `..`;
/// symlinks whose target is absolute or leaves `dest`; hard links to
/// anything but a regular file already unpacked; any entry whose parent
/// folder is a symlink (so nothing is written *through* a link); devices,
/// fifos and sparse files; more than `limits` allow. Modes keep only the
/// permission bits (no setuid, setgid or sticky); ownership is not applied.
/// Entries already written stay when a later entry is refused; callers
/// that need all-or-nothing unpack into a fresh folder and discard it.
///
/// The stream is parsed on the caller's task and every filesystem write
/// happens in order on one blocking thread, fed batches of work through a
/// bounded queue: many small files cost one queue trip instead of a
/// blocking-pool trip per call, and memory stays bounded. When this future
/// ends, the writer has stopped; when it is dropped, the writer stops after
/// its current entry.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use executor_core::tar::{pack_dir, unpack_untrusted, UnpackLimits};
/// let (src, dst) = (tempfile::tempdir()?, tempfile::tempdir()?);
/// std::fs::write(src.path().join("a.txt"), "hi")?;
/// let summary = unpack_untrusted(pack_dir(src.path()), dst.path(), UnpackLimits::default()).await?;
/// assert_eq!(summary.files, 1);
/// assert_eq!(std::fs::read_to_string(dst.path().join("a.txt"))?, "hi");
/// # Ok(()) }
/// ```
pub async fn unpack_untrusted<R: AsyncRead + Unpin>(
    reader: R,
    dest: &Path,
    limits: UnpackLimits,
) -> Result<UnpackSummary, UnpackError> {
    let (ops, queue) = mpsc::channel(QUEUE);
    let stop = Arc::new(AtomicBool::new(false));
    let writer = Writer {
        dest: dest.to_path_buf(),
        summary: UnpackSummary::default(),
        safe_dirs: HashSet::new(),
        file: None,
        stop: stop.clone(),
    };
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
    /// The stream or an entry was refused.
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
}

/// Parses the stream, checks each entry lexically and against the limits,
/// and queues what to write.
async fn read_entries<R: AsyncRead + Unpin>(
    reader: R,
    dest: &Path,
    limits: UnpackLimits,
    ops: &mut Batcher,
) -> Result<(), ReadEnd> {
    let io_err = |source: io::Error| UnpackError::Io {
        dest: dest.to_path_buf(),
        source,
    };
    let mut archive = Archive::new(reader);
    let mut entries = archive.entries().map_err(io_err)?;
    let (mut count, mut bytes) = (0u64, 0u64);
    while let Some(entry) = entries.next().await {
        let mut entry = entry.map_err(io_err)?;
        count += 1;
        if count > limits.max_entries {
            return Err(UnpackError::TooManyEntries {
                limit: limits.max_entries,
            }
            .into());
        }
        let raw = String::from_utf8_lossy(&entry.path_bytes().map_err(io_err)?).into_owned();
        let escape = |reason: &str| UnpackError::Escape {
            entry: raw.clone(),
            reason: reason.to_string(),
        };
        let Some(rel) = relative_path(&raw, limits.strip_components).map_err(escape)? else {
            continue;
        };
        let forbidden = |kind| UnpackError::Forbidden {
            entry: raw.clone(),
            kind,
        };
        let entry_io = |source: io::Error| UnpackError::Io {
            dest: dest.to_path_buf(),
            source: io::Error::new(source.kind(), format!("{raw}: {source}")),
        };
        match entry.header().entry_type() {
            EntryType::Char | EntryType::Block => return Err(forbidden("device").into()),
            EntryType::Fifo => return Err(forbidden("fifo").into()),
            EntryType::GNUSparse => return Err(forbidden("sparse file").into()),
            EntryType::Other(_) => return Err(forbidden("unknown").into()),
            EntryType::Directory => ops.send(Op::Dir { rel, raw }).await?,
            EntryType::Regular | EntryType::Continuous => {
                let size = entry.effective_size();
                if bytes.saturating_add(size) > limits.max_bytes {
                    return Err(UnpackError::TooLarge {
                        limit: limits.max_bytes,
                    }
                    .into());
                }
                bytes += size;
                let mode = entry.header().mode().map_err(entry_io)? & 0o777;
                ops.send(Op::File {
                    rel,
                    raw: raw.clone(),
                    mode,
                })
                .await?;
                // No more than the header promised, even if the reader misbehaves.
                let mut left = size;
                while left > 0 {
                    let want = CHUNK.min(left as usize);
                    let mut chunk = vec![0u8; want];
                    let mut filled = 0;
                    while filled < want {
                        match entry.read(&mut chunk[filled..]).await.map_err(entry_io)? {
                            0 => break,
                            n => filled += n,
                        }
                    }
                    chunk.truncate(filled);
                    left -= filled as u64;
                    if filled > 0 {
                        ops.send(Op::Data(chunk)).await?;
                    }
                    if filled < want {
                        // The stream ended inside the entry; the archive
                        // reader reports it at the next header.
                        break;
                    }
                }
                ops.send(Op::EndFile).await?;
            }
            EntryType::Symlink => {
                let link = entry
                    .link_name()
                    .map_err(entry_io)?
                    .ok_or_else(|| escape("symlink without a target"))?
                    .into_owned();
                if link.is_absolute() {
                    return Err(
                        escape(&format!("symlink to absolute path {}", link.display())).into(),
                    );
                }
                let parent = rel.parent().map(Path::to_path_buf).unwrap_or_default();
                if normalize(&parent.join(&link)).is_none() {
                    return Err(escape(&format!(
                        "symlink to {} points outside the destination",
                        link.display()
                    ))
                    .into());
                }
                ops.send(Op::Symlink { rel, raw, link }).await?;
            }
            EntryType::Link => {
                let link = entry
                    .link_name()
                    .map_err(entry_io)?
                    .ok_or_else(|| escape("hard link without a target"))?
                    .into_owned();
                let shown = link.display().to_string();
                let source = relative_path(&link.to_string_lossy(), limits.strip_components)
                    .map_err(|r| escape(&format!("hard link target: {r}")))?
                    .ok_or_else(|| escape("hard link to the destination itself"))?;
                ops.send(Op::HardLink {
                    rel,
                    raw,
                    source,
                    shown,
                })
                .await?;
            }
            // PAX and GNU long-name headers are consumed by the reader; other
            // extension kinds carry no file.
            _ => {}
        }
    }
    Ok(())
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

/// The entry's path relative to the destination; `Ok(None)` for the root itself.
fn relative_path(raw: &str, strip_components: usize) -> Result<Option<PathBuf>, &'static str> {
    let mut rel = PathBuf::new();
    for component in Path::new(raw).components() {
        match component {
            Component::Normal(part) => rel.push(part),
            Component::CurDir => {}
            Component::ParentDir => return Err("path contains `..`"),
            Component::RootDir | Component::Prefix(_) => return Err("absolute path"),
        }
    }
    let stripped: PathBuf = rel.components().skip(strip_components).collect();
    Ok((!stripped.as_os_str().is_empty()).then_some(stripped))
}

/// The file being written.
struct OpenFile {
    file: File,
    raw: String,
    mode: u32,
}

/// Does every filesystem write of one unpack, in order, on a blocking thread.
struct Writer {
    dest: PathBuf,
    summary: UnpackSummary,
    /// Folders (relative) already checked to be real folders, not links.
    safe_dirs: HashSet<PathBuf>,
    file: Option<OpenFile>,
    stop: Arc<AtomicBool>,
}

impl Writer {
    fn run(mut self, mut queue: mpsc::Receiver<Vec<Op>>) -> Result<UnpackSummary, UnpackError> {
        std::fs::create_dir_all(&self.dest).map_err(|source| UnpackError::Io {
            dest: self.dest.clone(),
            source,
        })?;
        while let Some(batch) = queue.blocking_recv() {
            for op in batch {
                if self.stop.load(Ordering::Relaxed) {
                    return Ok(self.summary);
                }
                self.apply(op)?;
            }
        }
        Ok(self.summary)
    }

    fn io_err(&self, raw: &str) -> impl Fn(io::Error) -> UnpackError + '_ {
        let raw = raw.to_string();
        move |source| UnpackError::Io {
            dest: self.dest.clone(),
            source: io::Error::new(source.kind(), format!("{raw}: {source}")),
        }
    }

    fn apply(&mut self, op: Op) -> Result<(), UnpackError> {
        match op {
            Op::Dir { rel, raw } => self.ensure_dir(&rel, &raw),
            Op::File { rel, raw, mode } => {
                self.ensure_parent(&rel, &raw)?;
                let target = self.dest.join(&rel);
                remove_non_dir(&target).map_err(self.io_err(&raw))?;
                let file = OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(mode | 0o200)
                    .open(&target)
                    .map_err(self.io_err(&raw))?;
                self.file = Some(OpenFile { file, raw, mode });
                Ok(())
            }
            Op::Data(bytes) => {
                let Some(open) = self.file.as_mut() else {
                    return Ok(());
                };
                if let Err(e) = open.file.write_all(&bytes) {
                    let raw = open.raw.clone();
                    return Err(self.io_err(&raw)(e));
                }
                self.summary.bytes += bytes.len() as u64;
                Ok(())
            }
            Op::EndFile => {
                let Some(open) = self.file.take() else {
                    return Ok(());
                };
                // Write bits were added to create it; now the archive's own.
                open.file
                    .set_permissions(std::fs::Permissions::from_mode(open.mode))
                    .map_err(self.io_err(&open.raw))?;
                self.summary.files += 1;
                Ok(())
            }
            Op::Symlink { rel, raw, link } => {
                self.ensure_parent(&rel, &raw)?;
                let target = self.dest.join(&rel);
                remove_non_dir(&target).map_err(self.io_err(&raw))?;
                std::os::unix::fs::symlink(&link, &target).map_err(self.io_err(&raw))?;
                self.summary.symlinks += 1;
                Ok(())
            }
            Op::HardLink {
                rel,
                raw,
                source,
                shown,
            } => {
                self.ensure_parent(&rel, &raw)?;
                if let Some(p) = source.parent() {
                    self.ensure_dir(p, &raw)?;
                }
                let escape = |reason: String| UnpackError::Escape {
                    entry: raw.clone(),
                    reason,
                };
                let from = self.dest.join(&source);
                let meta = std::fs::symlink_metadata(&from).map_err(|_| {
                    escape(format!("hard link to {shown} which is not in the archive"))
                })?;
                if !meta.file_type().is_file() {
                    return Err(escape(format!(
                        "hard link to {shown} which is not a regular file"
                    )));
                }
                let target = self.dest.join(&rel);
                remove_non_dir(&target).map_err(self.io_err(&raw))?;
                std::fs::hard_link(&from, &target).map_err(self.io_err(&raw))?;
                self.summary.files += 1;
                Ok(())
            }
        }
    }

    fn ensure_parent(&mut self, rel: &Path, raw: &str) -> Result<(), UnpackError> {
        match rel.parent() {
            Some(parent) => self.ensure_dir(parent, raw),
            None => Ok(()),
        }
    }

    /// Makes sure every component of `rel` is a real folder (created if
    /// missing), never a symlink, so no later write can go through a link.
    fn ensure_dir(&mut self, rel: &Path, raw: &str) -> Result<(), UnpackError> {
        let mut prefix = PathBuf::new();
        for part in rel.components() {
            prefix.push(part);
            if self.safe_dirs.contains(&prefix) {
                continue;
            }
            let abs = self.dest.join(&prefix);
            match std::fs::symlink_metadata(&abs) {
                Ok(meta) if meta.file_type().is_dir() => {}
                Ok(meta) if meta.file_type().is_symlink() => {
                    return Err(UnpackError::Escape {
                        entry: raw.to_string(),
                        reason: format!("would write through symlink {}", prefix.display()),
                    })
                }
                Ok(_) => {
                    return Err(UnpackError::Escape {
                        entry: raw.to_string(),
                        reason: format!("{} is a file, not a folder", prefix.display()),
                    })
                }
                Err(_) => {
                    std::fs::create_dir(&abs).map_err(self.io_err(raw))?;
                    self.summary.dirs += 1;
                }
            }
            self.safe_dirs.insert(prefix.clone());
        }
        Ok(())
    }
}

/// Lexically resolves `..` in a relative path; `None` if it climbs above its root.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// Removes a file or link at `path` so the next create cannot follow it.
fn remove_non_dir(path: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => Err(io::Error::new(
            io::ErrorKind::IsADirectory,
            "a folder is in the way",
        )),
        Ok(_) => std::fs::remove_file(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}
