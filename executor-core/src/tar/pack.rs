use std::ffi::OsString;
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, DuplexStream, ReadBuf};
use tokio::task::JoinHandle;
use tokio_tar::{Builder, Header, HeaderMode};

mod file;
mod small;

use file::{append_file, blocking};

use small::{list_sorted, read_small_files, small_file_run, with_path, Listed};

/// How much packed data may wait between the packer and its reader; the
/// packer blocks beyond this, so memory stays flat whatever the folder's size.
const PIPE_BYTES: usize = 256 * 1024;

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
mod tests;
