use std::ffi::OsString;
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, DuplexStream, ReadBuf};
use tokio::task::JoinHandle;
use tokio_tar::{Builder, Header, HeaderMode};

/// How much packed data may wait between the packer and its reader; the
/// packer blocks beyond this, so memory stays flat whatever the folder's size.
const PIPE_BYTES: usize = 256 * 1024;
/// How much of a file one read takes.
const READ_BUF: usize = 1024 * 1024;

/// A tar stream of a folder, produced on the fly by a background task.
///
/// Reading it yields the archive; if packing fails (a file vanished, a
/// permission error), the read that would have ended the stream returns
/// that error instead, so a consumer can never mistake a truncated archive
/// for a whole one. Dropping the stream stops the packer.
pub struct PackStream {
    pipe: DuplexStream,
    packer: Option<JoinHandle<io::Result<()>>>,
}

impl std::fmt::Debug for PackStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackStream").finish_non_exhaustive()
    }
}

impl Drop for PackStream {
    fn drop(&mut self) {
        if let Some(packer) = &self.packer {
            packer.abort();
        }
    }
}

/// Packs `dir` as a tar stream with entries relative to it.
///
/// Regular files keep their modes, symlinks are stored as symlinks (never
/// followed), empty folders are kept, and any file name is allowed (long
/// and non-ASCII names use GNU long-name entries). A fifo is packed as a
/// fifo entry; a socket or device fails the stream with its path named. A stream
/// that fails ends without the end-of-archive marker and its last read is
/// the error. Must be called inside a Tokio runtime.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> std::io::Result<()> {
/// use tokio::io::AsyncReadExt;
/// let dir = tempfile::tempdir()?;
/// std::fs::write(dir.path().join("hello.txt"), "hi")?;
/// let mut tar = Vec::new();
/// executor_core::tar::pack_dir(dir.path()).read_to_end(&mut tar).await?;
/// assert!(tar.len() >= 1024);
/// # Ok(()) }
/// ```
pub fn pack_dir(dir: &Path) -> PackStream {
    spawn_packer(Layout::Root(dir.to_path_buf()))
}

/// One top-level folder of a [`pack_folders`] archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackedFolder {
    /// Its name in the archive, e.g. `work`.
    pub name: String,
    /// Its permission bits, e.g. `0o755`.
    pub mode: u32,
    /// The host folder whose contents it holds; `None` for an empty folder.
    pub source: Option<PathBuf>,
}

impl PackedFolder {
    /// A folder named `name` with `mode`, holding `source`'s contents.
    pub fn new(name: impl Into<String>, mode: u32, source: Option<&Path>) -> Self {
        PackedFolder {
            name: name.into(),
            mode,
            source: source.map(Path::to_path_buf),
        }
    }
}

/// Packs several folders into one tar stream, each under its own name:
/// what a backend uploads in one request to create and fill a run's
/// folders (`work/` with the checkout, `steps/`, an empty `outputs/`).
///
/// Entries are packed as by [`pack_dir`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> std::io::Result<()> {
/// use executor_core::tar::{pack_folders, unpack_untrusted, PackedFolder, UnpackLimits};
/// let checkout = tempfile::tempdir()?;
/// std::fs::write(checkout.path().join("main.c"), "int main;")?;
/// let tar = pack_folders(vec![
///     PackedFolder::new("work", 0o755, Some(checkout.path())),
///     PackedFolder::new("outputs", 0o755, None),
/// ]);
/// let dest = tempfile::tempdir()?;
/// unpack_untrusted(tar, dest.path(), UnpackLimits::default()).await.unwrap();
/// assert!(dest.path().join("work/main.c").is_file());
/// assert!(dest.path().join("outputs").is_dir());
/// # Ok(()) }
/// ```
pub fn pack_folders(folders: Vec<PackedFolder>) -> PackStream {
    spawn_packer(Layout::Folders(folders))
}

/// Packs each folder's contents under its name, with no entry for the
/// named folder itself: a `tar x -C /` of it fills folders that exist
/// (mount points) without changing their owner, mode or times, which a
/// user other than root may not.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> std::io::Result<()> {
/// use executor_core::tar::{pack_contents, unpack_untrusted, UnpackLimits};
/// let (checkout, scripts) = (tempfile::tempdir()?, tempfile::tempdir()?);
/// std::fs::write(checkout.path().join("main.c"), "int main;")?;
/// std::fs::write(scripts.path().join("step.sh"), "make")?;
/// let tar = pack_contents(vec![
///     ("work".into(), checkout.path().to_path_buf()),
///     (".knotless".into(), scripts.path().to_path_buf()),
/// ]);
/// let dest = tempfile::tempdir()?;
/// unpack_untrusted(tar, dest.path(), UnpackLimits::default()).await.unwrap();
/// assert!(dest.path().join("work/main.c").is_file());
/// assert!(dest.path().join(".knotless/step.sh").is_file());
/// # Ok(()) }
/// ```
pub fn pack_contents(folders: Vec<(String, PathBuf)>) -> PackStream {
    spawn_packer(Layout::Contents(folders))
}

/// What a packer packs.
enum Layout {
    /// One folder's contents at the archive's root.
    Root(PathBuf),
    /// Named folders, each with its contents under its name.
    Folders(Vec<PackedFolder>),
    /// Folders' contents under names, with no entry for the named folders.
    Contents(Vec<(String, PathBuf)>),
}

/// Packs `layout` in a background task, behind the pipe a [`PackStream`] reads.
impl PackStream {
    /// A stream of what `task` writes into the pipe it is given; the
    /// task's error is the last read's.
    pub(super) fn from_task<F, Fut>(task: F) -> PackStream
    where
        F: FnOnce(DuplexStream) -> Fut,
        Fut: Future<Output = io::Result<()>> + Send + 'static,
    {
        let (writer, pipe) = tokio::io::duplex(PIPE_BYTES);
        PackStream {
            pipe,
            packer: Some(tokio::spawn(task(writer))),
        }
    }
}

fn spawn_packer(layout: Layout) -> PackStream {
    let (writer, pipe) = tokio::io::duplex(PIPE_BYTES);
    let packer = tokio::spawn(async move {
        // Never terminated on drop: a packer that fails must leave a stream
        // that ends without the end-of-archive marker, so no reader takes
        // what came before the failure for the whole archive.
        let mut builder = Builder::new_non_terminated(writer);
        builder.follow_symlinks(false);
        builder.mode(HeaderMode::Complete);
        match layout {
            Layout::Root(dir) => append_tree(&mut builder, &dir, Path::new("")).await?,
            Layout::Folders(folders) => {
                for folder in folders {
                    let name = Path::new(&folder.name);
                    let mut header = Header::new_gnu();
                    header.set_entry_type(tokio_tar::EntryType::Directory);
                    header.set_mode(folder.mode);
                    header.set_size(0);
                    header.set_mtime(crate::labels::unix_now());
                    builder
                        .append_data(&mut header, name, tokio::io::empty())
                        .await?;
                    if let Some(source) = &folder.source {
                        append_tree(&mut builder, source, name).await?;
                    }
                }
            }
            Layout::Contents(folders) => {
                for (name, source) in folders {
                    append_tree(&mut builder, &source, Path::new(&name)).await?;
                }
            }
        }
        builder.finish().await?;
        let mut writer = builder.into_inner().await?;
        tokio::io::AsyncWriteExt::shutdown(&mut writer).await
    });
    PackStream {
        pipe,
        packer: Some(packer),
    }
}

/// Appends `root`'s contents with names under `prefix`.
///
/// Each folder is listed in one blocking-pool trip, and runs of small
/// files are read whole, many per trip: a tree of many small files would
/// otherwise cost several trips (stat, open, read, read to the end) per
/// file, and the trips, not the reads, would be the time.
async fn append_tree(
    builder: &mut Builder<DuplexStream>,
    root: &Path,
    prefix: &Path,
) -> io::Result<()> {
    let meta = tokio::fs::metadata(root)
        .await
        .map_err(|e| with_path(e, root))?;
    if !meta.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::NotADirectory,
            format!("{} is not a folder", root.display()),
        ));
    }
    // Depth-first with sorted names, so the same tree always packs the same.
    let mut pending: Vec<PathBuf> = vec![PathBuf::new()];
    while let Some(rel) = pending.pop() {
        let abs = root.join(&rel);
        let entries = blocking({
            let abs = abs.clone();
            move || list_sorted(&abs)
        })
        .await?;
        let mut subdirs = Vec::new();
        let mut rest = entries.as_slice();
        while let Some(entry) = rest.first() {
            if entry.is_small_file() {
                let batch = small_file_run(rest);
                rest = &rest[batch.len()..];
                append_small_files(builder, &abs, &prefix.join(&rel), batch).await?;
                continue;
            }
            rest = &rest[1..];
            let child_rel = rel.join(&entry.name);
            let child_abs = abs.join(&entry.name);
            let archived = prefix.join(&child_rel);
            if entry.kind.is_file() {
                append_file(builder, &child_abs, &archived)
                    .await
                    .map_err(|e| with_path(e, &child_abs))?;
            } else if std::os::unix::fs::FileTypeExt::is_fifo(&entry.kind) {
                append_fifo(builder, &child_abs, &archived)
                    .await
                    .map_err(|e| with_path(e, &child_abs))?;
            } else if let Some(kind) = special_kind(entry.kind) {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!(
                        "{}: a {kind} cannot be packed; remove it from the folder",
                        child_abs.display()
                    ),
                ));
            } else {
                builder
                    .append_path_with_name(&child_abs, &archived)
                    .await
                    .map_err(|e| with_path(e, &child_abs))?;
            }
            if entry.kind.is_dir() {
                subdirs.push(child_rel);
            }
        }
        pending.extend(subdirs.into_iter().rev());
    }
    Ok(())
}

/// The name of a file kind that is not packed: a socket has no tar entry,
/// and a device node from a checkout is never meant to be recreated in an
/// environment. Refused by name, never silently dropped.
fn special_kind(kind: std::fs::FileType) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_socket() {
        Some("socket")
    } else if kind.is_block_device() || kind.is_char_device() {
        Some("device")
    } else {
        None
    }
}

/// Appends a fifo as its own entry, as GNU tar does (the untrusted
/// unpacker refuses it, one entry, on the way back).
async fn append_fifo(
    builder: &mut Builder<DuplexStream>,
    abs: &Path,
    archived: &Path,
) -> io::Result<()> {
    let meta = tokio::fs::symlink_metadata(abs).await?;
    let mut header = Header::new_gnu();
    header.set_metadata_in_mode(&meta, HeaderMode::Complete);
    header.set_entry_type(tokio_tar::EntryType::Fifo);
    header.set_size(0);
    builder
        .append_data(&mut header, archived, tokio::io::empty())
        .await
}

/// Appends `batch`, small files of `dir`, read in one blocking trip, with
/// names under `archived_dir`.
async fn append_small_files(
    builder: &mut Builder<DuplexStream>,
    dir: &Path,
    archived_dir: &Path,
    batch: &[Listed],
) -> io::Result<()> {
    let names: Vec<OsString> = batch.iter().map(|e| e.name.clone()).collect();
    let files = blocking({
        let dir = dir.to_path_buf();
        move || read_small_files(&dir, names)
    })
    .await?;
    for file in files {
        let abs = dir.join(&file.name);
        let archived = archived_dir.join(&file.name);
        match file.data {
            Some(data) => {
                let mut header = Header::new_gnu();
                header.set_metadata_in_mode(&file.meta, HeaderMode::Complete);
                builder
                    .append_data(&mut header, &archived, data.as_slice())
                    .await
            }
            // It grew past the small size since it was listed.
            None => append_file(builder, &abs, &archived).await,
        }
        .map_err(|e| with_path(e, &abs))?;
    }
    Ok(())
}

/// Files at most this big are read whole, several per blocking trip;
/// bigger ones are streamed.
const SMALL_FILE: u64 = 64 * 1024;
/// At most this much small-file data is read in one trip, which bounds
/// the memory a batch holds.
const SMALL_BATCH_BYTES: u64 = 1024 * 1024;

/// One folder entry, as listed (not followed).
struct Listed {
    name: OsString,
    kind: std::fs::FileType,
    len: u64,
}

impl Listed {
    fn is_small_file(&self) -> bool {
        self.kind.is_file() && self.len <= SMALL_FILE
    }
}

/// The small files at the head of `entries`, up to one batch's worth.
fn small_file_run(entries: &[Listed]) -> &[Listed] {
    let mut bytes = 0;
    let n = entries
        .iter()
        .take_while(|e| {
            let fits = e.is_small_file() && bytes < SMALL_BATCH_BYTES;
            bytes += e.len;
            fits
        })
        .count();
    &entries[..n]
}

/// `dir`'s entries sorted by name, each with its own (unfollowed) type.
fn list_sorted(dir: &Path) -> io::Result<Vec<Listed>> {
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| with_path(e, dir))? {
        let entry = entry.map_err(|e| with_path(e, dir))?;
        let path = entry.path();
        let meta = std::fs::symlink_metadata(&path).map_err(|e| with_path(e, &path))?;
        entries.push(Listed {
            name: entry.file_name(),
            kind: meta.file_type(),
            len: meta.len(),
        });
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(entries)
}

/// A small file read whole; `data` is `None` when it grew past
/// [`SMALL_FILE`] since it was listed, to be streamed instead.
struct SmallFile {
    name: OsString,
    meta: std::fs::Metadata,
    data: Option<Vec<u8>>,
}

/// Reads `names` in `dir`, never following a link that replaced a file
/// since it was listed. Each file's size is the opened file's; one that
/// shrinks while it is read is an error, never a short entry.
fn read_small_files(dir: &Path, names: Vec<OsString>) -> io::Result<Vec<SmallFile>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    names
        .into_iter()
        .map(|name| {
            let path = dir.join(&name);
            let read = || -> io::Result<SmallFile> {
                let file = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
                    .open(&path)?;
                let meta = file.metadata()?;
                if !meta.is_file() {
                    return Err(io::Error::other(
                        "it stopped being a file while it was packed",
                    ));
                }
                if meta.len() > SMALL_FILE {
                    return Ok(SmallFile {
                        name: name.clone(),
                        meta,
                        data: None,
                    });
                }
                let mut data = Vec::with_capacity(meta.len() as usize);
                file.take(meta.len()).read_to_end(&mut data)?;
                let missing = meta.len() - data.len() as u64;
                if missing > 0 {
                    return Err(shrank(missing));
                }
                Ok(SmallFile {
                    name: name.clone(),
                    meta,
                    data: Some(data),
                })
            };
            read().map_err(|e| with_path(e, &path))
        })
        .collect()
}

/// Runs filesystem work on the blocking pool.
async fn blocking<T: Send + 'static>(
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
async fn append_file(
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
struct SizedReader<R> {
    inner: R,
    remaining: u64,
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

/// A file that ended `missing` bytes before the size its header promised.
fn shrank(missing: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!("the file shrank while it was packed ({missing} bytes missing)"),
    )
}

fn with_path(err: io::Error, path: &Path) -> io::Error {
    io::Error::new(err.kind(), format!("{}: {err}", path.display()))
}

impl AsyncRead for PackStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        ready!(Pin::new(&mut self.pipe).poll_read(cx, buf))?;
        if buf.filled().len() > before || buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        // End of the pipe: the archive is whole only if the packer succeeded.
        let Some(packer) = self.packer.as_mut() else {
            return Poll::Ready(Ok(()));
        };
        let outcome = ready!(Pin::new(packer).poll(cx));
        self.packer = None;
        Poll::Ready(match outcome {
            Ok(result) => result,
            Err(join) => Err(io::Error::other(format!("tar packer failed: {join}"))),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_file_that_shrank_is_an_error_not_a_short_entry() {
        let mut data = SizedReader {
            inner: &b"abc"[..],
            remaining: 5,
        };
        let err = tokio::io::copy(&mut data, &mut tokio::io::sink())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
        assert!(err.to_string().contains("2 bytes missing"), "{err}");
    }

    #[tokio::test]
    async fn a_file_read_whole_ends_cleanly() {
        let mut data = SizedReader {
            inner: &b"abcde"[..],
            remaining: 5,
        };
        let n = tokio::io::copy(&mut data, &mut tokio::io::sink())
            .await
            .unwrap();
        assert_eq!(n, 5);
    }
}
