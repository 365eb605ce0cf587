use std::collections::HashSet;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use futures_util::StreamExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio_tar::{Archive, EntryType};

/// Bytes gathered before each write of a file's contents.
const WRITE_BUF: usize = 1 << 20;

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
    let io_err = |source: io::Error| UnpackError::Io {
        dest: dest.to_path_buf(),
        source,
    };
    tokio::fs::create_dir_all(dest).await.map_err(io_err)?;
    let mut state = Unpacker {
        dest: dest.to_path_buf(),
        limits,
        summary: UnpackSummary::default(),
        safe_dirs: HashSet::new(),
        entries: 0,
    };
    let mut archive = Archive::new(reader);
    let mut entries = archive.entries().map_err(io_err)?;
    while let Some(entry) = entries.next().await {
        let mut entry = entry.map_err(io_err)?;
        state.entries += 1;
        if state.entries > limits.max_entries {
            return Err(UnpackError::TooManyEntries {
                limit: limits.max_entries,
            });
        }
        state.unpack_entry(&mut entry).await?;
    }
    Ok(state.summary)
}

struct Unpacker {
    dest: PathBuf,
    limits: UnpackLimits,
    summary: UnpackSummary,
    /// Folders (relative) already checked to be real folders, not links.
    safe_dirs: HashSet<PathBuf>,
    entries: u64,
}

impl Unpacker {
    async fn unpack_entry<R: AsyncRead + Unpin>(
        &mut self,
        entry: &mut tokio_tar::Entry<Archive<R>>,
    ) -> Result<(), UnpackError> {
        let raw = match entry.path_bytes() {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(source) => {
                return Err(UnpackError::Io {
                    dest: self.dest.clone(),
                    source,
                })
            }
        };
        let escape = |reason: &str| UnpackError::Escape {
            entry: raw.clone(),
            reason: reason.to_string(),
        };
        let Some(rel) = self.relative_path(&raw).map_err(escape)? else {
            return Ok(());
        };
        let kind = entry.header().entry_type();
        let forbidden = |kind| UnpackError::Forbidden {
            entry: raw.clone(),
            kind,
        };
        match kind {
            EntryType::Char | EntryType::Block => return Err(forbidden("device")),
            EntryType::Fifo => return Err(forbidden("fifo")),
            EntryType::GNUSparse => return Err(forbidden("sparse file")),
            EntryType::Other(_) => return Err(forbidden("unknown")),
            _ => {}
        }
        let parent = rel.parent().map(Path::to_path_buf).unwrap_or_default();
        self.ensure_dir(&parent, &raw).await?;
        let target = self.dest.join(&rel);
        let dest = self.dest.clone();
        let io_err = |source: io::Error| UnpackError::Io {
            dest: dest.clone(),
            source: io::Error::new(source.kind(), format!("{raw}: {source}")),
        };

        match kind {
            EntryType::Directory => {
                self.ensure_dir(&rel, &raw).await?;
            }
            EntryType::Regular | EntryType::Continuous => {
                let size = entry.effective_size();
                if self.summary.bytes.saturating_add(size) > self.limits.max_bytes {
                    return Err(UnpackError::TooLarge {
                        limit: self.limits.max_bytes,
                    });
                }
                remove_non_dir(&target).await.map_err(io_err)?;
                let mode = entry.header().mode().map_err(io_err)? & 0o777;
                let file = tokio::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(mode | 0o200)
                    .open(&target)
                    .await
                    .map_err(io_err)?;
                // Every tokio file write is a trip to the blocking pool: write
                // in large pieces, not tokio::io::copy's 8 KiB ones.
                let mut file = tokio::io::BufWriter::with_capacity(WRITE_BUF, file);
                // Copy no more than the header promised, even if the reader misbehaves.
                let written = tokio::io::copy(&mut (&mut *entry).take(size), &mut file)
                    .await
                    .map_err(io_err)?;
                file.flush().await.map_err(io_err)?;
                drop(file);
                tokio::fs::set_permissions(&target, std::fs::Permissions::from_mode(mode))
                    .await
                    .map_err(io_err)?;
                self.summary.bytes += written;
                self.summary.files += 1;
            }
            EntryType::Symlink => {
                let link = entry
                    .link_name()
                    .map_err(io_err)?
                    .ok_or_else(|| escape("symlink without a target"))?
                    .into_owned();
                if link.is_absolute() {
                    return Err(escape(&format!(
                        "symlink to absolute path {}",
                        link.display()
                    )));
                }
                if normalize(&parent.join(&link)).is_none() {
                    return Err(escape(&format!(
                        "symlink to {} points outside the destination",
                        link.display()
                    )));
                }
                remove_non_dir(&target).await.map_err(io_err)?;
                tokio::fs::symlink(&link, &target).await.map_err(io_err)?;
                self.summary.symlinks += 1;
            }
            EntryType::Link => {
                let link = entry
                    .link_name()
                    .map_err(io_err)?
                    .ok_or_else(|| escape("hard link without a target"))?
                    .into_owned();
                let link_rel = self
                    .relative_path(&link.to_string_lossy())
                    .map_err(|r| escape(&format!("hard link target: {r}")))?
                    .ok_or_else(|| escape("hard link to the destination itself"))?;
                if let Some(p) = link_rel.parent() {
                    self.ensure_dir(p, &raw).await?;
                }
                let source = self.dest.join(&link_rel);
                let meta = tokio::fs::symlink_metadata(&source).await.map_err(|_| {
                    escape(&format!(
                        "hard link to {} which is not in the archive",
                        link.display()
                    ))
                })?;
                if !meta.file_type().is_file() {
                    return Err(escape(&format!(
                        "hard link to {} which is not a regular file",
                        link.display()
                    )));
                }
                remove_non_dir(&target).await.map_err(io_err)?;
                tokio::fs::hard_link(&source, &target)
                    .await
                    .map_err(io_err)?;
                self.summary.files += 1;
            }
            // PAX and GNU long-name headers are consumed by the reader; other
            // extension kinds carry no file.
            _ => {}
        }
        Ok(())
    }

    /// The entry's path relative to the destination; `Ok(None)` for the root itself.
    fn relative_path(&self, raw: &str) -> Result<Option<PathBuf>, &'static str> {
        let path = Path::new(raw);
        let mut rel = PathBuf::new();
        for component in path.components() {
            match component {
                Component::Normal(part) => rel.push(part),
                Component::CurDir => {}
                Component::ParentDir => return Err("path contains `..`"),
                Component::RootDir | Component::Prefix(_) => return Err("absolute path"),
            }
        }
        let stripped: PathBuf = rel
            .components()
            .skip(self.limits.strip_components)
            .collect();
        Ok((!stripped.as_os_str().is_empty()).then_some(stripped))
    }

    /// Makes sure every component of `rel` is a real folder (created if
    /// missing), never a symlink, so no later write can go through a link.
    async fn ensure_dir(&mut self, rel: &Path, raw: &str) -> Result<(), UnpackError> {
        let mut prefix = PathBuf::new();
        for part in rel.components() {
            prefix.push(part);
            if self.safe_dirs.contains(&prefix) {
                continue;
            }
            let abs = self.dest.join(&prefix);
            match tokio::fs::symlink_metadata(&abs).await {
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
                    tokio::fs::create_dir(&abs)
                        .await
                        .map_err(|source| UnpackError::Io {
                            dest: self.dest.clone(),
                            source: io::Error::new(source.kind(), format!("{raw}: {source}")),
                        })?;
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
async fn remove_non_dir(path: &Path) -> io::Result<()> {
    match tokio::fs::symlink_metadata(path).await {
        Ok(meta) if meta.is_dir() => Err(io::Error::new(
            io::ErrorKind::IsADirectory,
            "a folder is in the way",
        )),
        Ok(_) => tokio::fs::remove_file(path).await,
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}
