//! Small files read whole, several per blocking trip: a tree of many small
//! files packs at the speed of the disk, not of the thread hand-offs.

use std::ffi::OsString;
use std::io;
use std::path::Path;

/// Files at most this big are read whole, several per blocking trip;
/// bigger ones are streamed.
pub(super) const SMALL_FILE: u64 = 64 * 1024;
/// At most this much small-file data is read in one trip, which bounds
/// the memory a batch holds.
pub(super) const SMALL_BATCH_BYTES: u64 = 1024 * 1024;

/// One folder entry, as listed (not followed).
pub(super) struct Listed {
    pub(super) name: OsString,
    pub(super) kind: std::fs::FileType,
    pub(super) len: u64,
}

impl Listed {
    pub(super) fn is_small_file(&self) -> bool {
        self.kind.is_file() && self.len <= SMALL_FILE
    }
}

/// The small files at the head of `entries`, up to one batch's worth.
pub(super) fn small_file_run(entries: &[Listed]) -> &[Listed] {
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
pub(super) fn list_sorted(dir: &Path) -> io::Result<Vec<Listed>> {
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
pub(super) struct SmallFile {
    pub(super) name: OsString,
    pub(super) meta: std::fs::Metadata,
    pub(super) data: Option<Vec<u8>>,
}

/// Reads `names` in `dir`, never following a link that replaced a file
/// since it was listed. Each file's size is the opened file's; one that
/// shrinks while it is read is an error, never a short entry.
pub(super) fn read_small_files(dir: &Path, names: Vec<OsString>) -> io::Result<Vec<SmallFile>> {
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

/// A file that ended `missing` bytes before the size its header promised.
pub(super) fn shrank(missing: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!("the file shrank while it was packed ({missing} bytes missing)"),
    )
}

pub(super) fn with_path(err: io::Error, path: &Path) -> io::Error {
    io::Error::new(err.kind(), format!("{}: {err}", path.display()))
}
