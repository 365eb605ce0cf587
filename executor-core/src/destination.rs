//! Where a run writes its result, log or events: a file it may replace
//! whole, or something else that is only ever written into.
//!
//! A result is written through a temporary file and a rename, so a reader
//! never sees half of one. That is right for a regular file and wrong for
//! anything else: renamed over `/dev/null` it replaces the host's device
//! with a regular file, over a FIFO it takes the pipe away from its
//! reader. So a run asks its [`Destination`] first: only a
//! [`File`](Destination::File) is replaced or has files made beside it
//! (a resumable log's mark, lock and record); every other kind is opened
//! and written into, and is left as it was.
//!
//! ```
//! use executor_core::destination::Destination;
//! let dir = tempfile::tempdir().unwrap();
//! let file = dir.path().join("result.json");
//! assert!(Destination::of(&file).unwrap().is_file());
//! assert!(!Destination::of("/dev/stdout".as_ref()).unwrap().is_file());
//! ```

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// What a path a run writes to is, decided before anything is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// A regular file, or none yet: replaced whole, with room for files
    /// beside it. A symlink to a regular file is followed, so the file is
    /// replaced and the link kept.
    File(PathBuf),
    /// A character or block device, a FIFO, a socket or a terminal:
    /// opened and written into, never replaced, nothing made beside it.
    Stream {
        /// The path as given.
        path: PathBuf,
        /// What it is, for messages: `"a FIFO"`, `"a character device"`.
        kind: &'static str,
    },
    /// One of this process's own descriptors by name (`/dev/stdout`,
    /// `/dev/stderr`, `/dev/fd/N`, `/proc/self/fd/N`): written into that
    /// descriptor as it is, at its own offset, never reopened (a reopened
    /// `/dev/stdout` that is a file would start again at its first byte).
    Descriptor {
        /// The path as given.
        path: PathBuf,
        /// The descriptor it names.
        fd: i32,
    },
}

impl Destination {
    /// What `path` is now.
    ///
    /// # Errors
    /// `IsADirectory` for a folder; the error of reading what `path` is.
    pub fn of(path: &Path) -> io::Result<Self> {
        if let Some(fd) = descriptor_named(path) {
            return Ok(Destination::Descriptor {
                path: path.to_path_buf(),
                fd,
            });
        }
        let own = match std::fs::symlink_metadata(path) {
            Ok(meta) => meta,
            Err(err) if err.kind() == io::ErrorKind::NotFound => {
                return Ok(Destination::File(path.to_path_buf()))
            }
            Err(err) => return Err(err),
        };
        let (meta, file) = if own.file_type().is_symlink() {
            match std::fs::metadata(path) {
                Ok(meta) if meta.is_file() => (meta, std::fs::canonicalize(path)?),
                Ok(meta) => (meta, path.to_path_buf()),
                // A link to nothing yet: what it names is made, the link kept.
                Err(err) if err.kind() == io::ErrorKind::NotFound => {
                    let target = std::fs::read_link(path)?;
                    let target = match path.parent() {
                        Some(dir) if target.is_relative() => dir.join(target),
                        _ => target,
                    };
                    return Ok(Destination::File(target));
                }
                Err(err) => return Err(err),
            }
        } else {
            (own, path.to_path_buf())
        };
        let kind = meta.file_type();
        let kind = if kind.is_file() {
            return Ok(Destination::File(file));
        } else if kind.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                format!("{} is a folder; name a file in it", path.display()),
            ));
        } else if kind.is_char_device() {
            "a character device"
        } else if kind.is_block_device() {
            "a block device"
        } else if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_socket() {
            "a socket"
        } else {
            "not a regular file"
        };
        Ok(Destination::Stream {
            path: path.to_path_buf(),
            kind,
        })
    }

    /// Whether this is a regular file, replaced whole, with room beside it.
    pub fn is_file(&self) -> bool {
        matches!(self, Destination::File(_))
    }

    /// What it is, for a message: `"a regular file"`, `"a FIFO"`,
    /// `"standard output"`.
    pub fn kind(&self) -> &'static str {
        match self {
            Destination::File(_) => "a regular file",
            Destination::Stream { kind, .. } => kind,
            Destination::Descriptor { fd: 1, .. } => "standard output",
            Destination::Descriptor { fd: 2, .. } => "standard error",
            Destination::Descriptor { .. } => "a descriptor of this process",
        }
    }

    /// Checks, without opening or making anything, that a run could write
    /// here: a file's folder exists and may be written, a stream or device
    /// may be written. A FIFO is not opened: its reader would see an end.
    ///
    /// # Errors
    /// A message saying what is missing or not allowed.
    pub fn check_writable(&self) -> Result<(), String> {
        use nix::unistd::{access, AccessFlags};
        match self {
            Destination::File(path) => {
                let dir = match path.parent() {
                    Some(dir) if !dir.as_os_str().is_empty() => dir,
                    _ => Path::new("."),
                };
                if !dir.is_dir() {
                    return Err(format!(
                        "the folder {} does not exist; make it first",
                        dir.display()
                    ));
                }
                // Made beside the file and renamed over it: the folder is
                // what must be writable, also for a file that is there.
                access(dir, AccessFlags::W_OK | AccessFlags::X_OK).map_err(|err| {
                    format!(
                        "the folder {} may not be written by this user ({err})",
                        dir.display()
                    )
                })
            }
            Destination::Stream { path, kind } => access(path.as_path(), AccessFlags::W_OK)
                .map_err(|err| {
                    format!(
                        "{} is {kind} this user may not write ({err})",
                        path.display()
                    )
                }),
            Destination::Descriptor { path, fd } => {
                std::fs::metadata(format!("/proc/self/fd/{fd}"))
                    .map(drop)
                    .map_err(|err| {
                        format!("{} is not open in this process ({err})", path.display())
                    })
            }
        }
    }

    /// Opens it for a stream of writes: a file created or truncated; a
    /// stream or descriptor written into as it is. A FIFO nobody reads is
    /// an error, not a wait.
    ///
    /// # Errors
    /// The error of opening; `BrokenPipe` for a FIFO with no reader.
    pub fn open(&self) -> io::Result<std::fs::File> {
        match self {
            Destination::File(path) => std::fs::File::create(path),
            Destination::Stream { path, kind } => open_stream(path, kind),
            Destination::Descriptor { fd, .. } => duplicate(*fd),
        }
    }

    /// Writes `bytes` as the whole of it: a file through a temporary file
    /// beside it and a rename, so a reader never sees half; anything else
    /// written into once, and left as it was.
    ///
    /// # Errors
    /// The error of writing, renaming or opening.
    pub fn replace_with(&self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Destination::File(path) => {
                let mut tmp = path.as_os_str().to_owned();
                tmp.push(".tmp");
                let tmp = PathBuf::from(tmp);
                std::fs::write(&tmp, bytes)?;
                std::fs::rename(&tmp, path).inspect_err(|_| {
                    // Nothing of a write that failed is left behind.
                    let _ = std::fs::remove_file(&tmp);
                })
            }
            other => {
                let mut out = other.open()?;
                out.write_all(bytes)?;
                out.flush()
            }
        }
    }
}

/// The descriptor a path names by being one of this process's own.
fn descriptor_named(path: &Path) -> Option<i32> {
    let text = path.to_str()?;
    match text {
        "/dev/stdout" => return Some(1),
        "/dev/stderr" => return Some(2),
        _ => {}
    }
    let number = text
        .strip_prefix("/dev/fd/")
        .or_else(|| text.strip_prefix("/proc/self/fd/"))?;
    number.parse().ok()
}

fn duplicate(fd: i32) -> io::Result<std::fs::File> {
    use std::os::fd::FromRawFd;
    // SAFETY: dup takes a number and fails with EBADF for one not open.
    let copy = unsafe { nix::libc::fcntl(fd, nix::libc::F_DUPFD_CLOEXEC, 3) };
    if copy < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `copy` is a new descriptor no one else owns.
    Ok(std::fs::File::from(unsafe { OwnedFd::from_raw_fd(copy) }))
}

fn open_stream(path: &Path, kind: &str) -> io::Result<std::fs::File> {
    if kind == "a socket" {
        let stream = std::os::unix::net::UnixStream::connect(path)?;
        return Ok(std::fs::File::from(OwnedFd::from(stream)));
    }
    // Non-blocking to open: a FIFO nobody reads answers at once instead
    // of holding the run; then blocking, so writes wait for the reader.
    let file = OpenOptions::new()
        .write(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(path)
        .map_err(|err| {
            if err.raw_os_error() == Some(nix::libc::ENXIO) && kind == "a FIFO" {
                io::Error::new(
                    io::ErrorKind::BrokenPipe,
                    format!("the FIFO {} has no reader", path.display()),
                )
            } else {
                err
            }
        })?;
    let flags = nix::fcntl::fcntl(file.as_fd(), nix::fcntl::FcntlArg::F_GETFL)?;
    let flags = nix::fcntl::OFlag::from_bits_retain(flags) & !nix::fcntl::OFlag::O_NONBLOCK;
    nix::fcntl::fcntl(file.as_fd(), nix::fcntl::FcntlArg::F_SETFL(flags))?;
    Ok(file)
}

#[cfg(test)]
mod tests;
