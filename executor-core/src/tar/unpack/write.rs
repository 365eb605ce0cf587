//! Every filesystem write of one unpack, in archive order, on one blocking
//! thread; refused entries are recorded, not written.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;

use super::record::{Capped, Forgetful, Keys, PathKey};
use super::{Op, UnpackError, UnpackSummary};
use paths::{op_raw, push_components, remove_non_dir, shown};

mod paths;

/// How many links one resolution may follow, as the kernel's `ELOOP`.
const MAX_HOPS: usize = 40;
/// How many path parts one resolution may walk, links' targets included:
/// a link target is at most 4,095 bytes, so a real one walks far fewer,
/// and a walk past this is refused rather than followed at any cost.
const MAX_WALK: usize = 4096;
/// How many paths links may pass through, in all: each is kept for the
/// whole unpack (8 bytes and the set's overhead), so this bounds the
/// record at about 10 MiB (twice that while it grows), and a link that
/// would pass it is refused. 250 links of the longest target Linux holds
/// fit, and far more of any real length.
const MAX_TRAVERSED: usize = 1 << 19;
/// How many facts about folders and missing paths are cached before the
/// cache starts over; forgetting one costs a `stat`, never a wrong answer.
const MAX_CACHED: usize = 1 << 16;

/// The file being written.
struct OpenFile {
    file: File,
    raw: String,
    mode: u32,
}

/// Why one entry was not written.
enum Skip {
    /// Refused for safety: recorded, and the unpack goes on.
    Refused(String),
    /// The host failed: the unpack ends.
    Failed(UnpackError),
}

impl From<UnpackError> for Skip {
    fn from(err: UnpackError) -> Self {
        Skip::Failed(err)
    }
}

/// Does every filesystem write of one unpack, in order, on a blocking thread.
pub(super) struct Writer {
    dest: PathBuf,
    summary: UnpackSummary,
    /// Things created so far (entries and implied folders), against `max_entries`.
    created: u64,
    max_entries: u64,
    keys: Keys,
    /// Paths already checked to be real folders, not links. A folder is
    /// never replaced by this writer, so this stays true.
    safe_dirs: Forgetful,
    /// Paths checked to be missing or a file: nothing exists below them.
    /// A link or folder made at one removes it.
    not_folders: Forgetful,
    /// Every path an unpacked link's target passes through (not its last
    /// component): a link created there later would change where that
    /// earlier link points, after it was checked.
    traversed: Capped,
    file: Option<OpenFile>,
    stop: Arc<AtomicBool>,
}

impl Writer {
    pub(super) fn new(dest: &Path, max_entries: u64, stop: Arc<AtomicBool>) -> Self {
        Writer {
            dest: dest.to_path_buf(),
            summary: UnpackSummary::default(),
            created: 0,
            max_entries,
            keys: Keys::new(),
            safe_dirs: Forgetful::new(MAX_CACHED),
            not_folders: Forgetful::new(MAX_CACHED),
            traversed: Capped::new(MAX_TRAVERSED),
            file: None,
            stop,
        }
    }

    pub(super) fn run(
        mut self,
        mut queue: mpsc::Receiver<Vec<Op>>,
    ) -> Result<UnpackSummary, UnpackError> {
        // Created on the first operation, not before: an empty stream (a
        // dry-run's) writes nothing at all.
        let mut dest_made = false;
        while let Some(batch) = queue.blocking_recv() {
            for op in batch {
                if !dest_made {
                    std::fs::create_dir_all(&self.dest).map_err(|source| UnpackError::Io {
                        dest: self.dest.clone(),
                        source,
                    })?;
                    dest_made = true;
                }
                if self.stop.load(Ordering::Relaxed) {
                    return Ok(self.summary);
                }
                let raw = op_raw(&op);
                match self.apply(op) {
                    Ok(()) => {}
                    Err(Skip::Refused(reason)) => {
                        // Contents of a refused file are dropped, not written.
                        self.file = None;
                        self.summary.refuse(&raw, reason);
                    }
                    Err(Skip::Failed(err)) => return Err(err),
                }
            }
        }
        Ok(self.summary)
    }

    /// A failed write of the entry `raw`: a name the host cannot hold
    /// (too long, or with a NUL) refuses that entry only; anything else
    /// (a full disk, a lost permission) ends the unpack.
    fn io_err(&self, raw: &str) -> impl Fn(io::Error) -> Skip + '_ {
        let raw = raw.to_string();
        move |source| {
            let name_too_long = source.raw_os_error() == Some(nix::libc::ENAMETOOLONG);
            if name_too_long || source.kind() == io::ErrorKind::InvalidInput {
                return Skip::Refused(format!("the host cannot hold this name: {source}"));
            }
            Skip::Failed(UnpackError::Io {
                dest: self.dest.clone(),
                source: io::Error::new(source.kind(), format!("{raw}: {source}")),
            })
        }
    }

    /// Counts one more thing created against the entry cap.
    fn count(&mut self) -> Result<(), Skip> {
        self.created = self.created.saturating_add(1);
        if self.created > self.max_entries {
            return Err(Skip::Failed(UnpackError::TooManyEntries {
                limit: self.max_entries,
            }));
        }
        Ok(())
    }

    fn apply(&mut self, op: Op) -> Result<(), Skip> {
        match op {
            Op::Refused { reason, .. } => Err(Skip::Refused(reason)),
            Op::Root => Ok(()),
            Op::Dir { rel, .. } => self.ensure_dir(&rel),
            Op::File { rel, raw, mode } => {
                self.ensure_parent(&rel)?;
                self.replaceable(&rel)?;
                self.count()?;
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
                self.ensure_parent(&rel)?;
                let key = self.keys.of(&rel);
                if self.traversed.contains(&key) {
                    return Err(Skip::Refused(format!(
                        "an earlier link points through {}; a link there would move it",
                        rel.display()
                    )));
                }
                self.replaceable(&rel)?;
                let parent = rel.parent().map(Path::to_path_buf).unwrap_or_default();
                let passes = self.resolve_inside(&parent, &link).map_err(|why| {
                    Skip::Refused(format!("symlink to {}: {why}", link.display()))
                })?;
                if !self.traversed.has_room_for(passes.len()) {
                    return Err(Skip::Refused(format!(
                        "links already pass through {MAX_TRAVERSED} paths, as many as are checked"
                    )));
                }
                self.count()?;
                let target = self.dest.join(&rel);
                remove_non_dir(&target).map_err(self.io_err(&raw))?;
                std::os::unix::fs::symlink(&link, &target).map_err(self.io_err(&raw))?;
                self.not_folders.remove(&key);
                self.traversed.extend(passes);
                self.summary.symlinks += 1;
                Ok(())
            }
            Op::HardLink {
                rel,
                raw,
                source,
                shown,
            } => {
                if source == rel {
                    // Replacing the file by a link to itself would delete it.
                    return Err(Skip::Refused("hard link to itself".into()));
                }
                self.ensure_parent(&rel)?;
                if let Some(p) = source.parent() {
                    self.ensure_dir(p)?;
                }
                let from = self.dest.join(&source);
                let meta = std::fs::symlink_metadata(&from).map_err(|_| {
                    Skip::Refused(format!("hard link to {shown} which is not in the archive"))
                })?;
                if !meta.file_type().is_file() {
                    return Err(Skip::Refused(format!(
                        "hard link to {shown} which is not a regular file"
                    )));
                }
                self.replaceable(&rel)?;
                self.count()?;
                let target = self.dest.join(&rel);
                remove_non_dir(&target).map_err(self.io_err(&raw))?;
                std::fs::hard_link(&from, &target).map_err(self.io_err(&raw))?;
                self.summary.files += 1;
                Ok(())
            }
        }
    }

    /// Refuses to replace a folder with a file or link: a folder may hold
    /// entries already written, and a link in its place would redirect
    /// what other links resolve through.
    fn replaceable(&self, rel: &Path) -> Result<(), Skip> {
        match std::fs::symlink_metadata(self.dest.join(rel)) {
            Ok(meta) if meta.is_dir() => Err(Skip::Refused(format!(
                "{} is a folder already unpacked",
                rel.display()
            ))),
            _ => Ok(()),
        }
    }

    fn ensure_parent(&mut self, rel: &Path) -> Result<(), Skip> {
        match rel.parent() {
            Some(parent) => self.ensure_dir(parent),
            None => Ok(()),
        }
    }

    /// Makes sure every component of `rel` is a real folder (created if
    /// missing), never a symlink, so no later write can go through a link.
    fn ensure_dir(&mut self, rel: &Path) -> Result<(), Skip> {
        let mut key = PathKey::default();
        let mut abs = self.dest.clone();
        // Below a folder just made, nothing exists yet: no need to look.
        let mut made = false;
        for part in rel.iter() {
            key = self.keys.child(key, part);
            abs.push(part);
            if self.safe_dirs.contains(&key) {
                continue;
            }
            let found = if made {
                None
            } else {
                std::fs::symlink_metadata(&abs).ok()
            };
            match found {
                Some(meta) if meta.file_type().is_dir() => {}
                Some(meta) if meta.file_type().is_symlink() => {
                    return Err(Skip::Refused(format!(
                        "would write through symlink {}",
                        shown(&self.dest, &abs)
                    )))
                }
                Some(_) => {
                    return Err(Skip::Refused(format!(
                        "{} is a file, not a folder",
                        shown(&self.dest, &abs)
                    )))
                }
                None => {
                    self.count()?;
                    if let Err(err) = std::fs::create_dir(&abs) {
                        return Err(self.io_err(&shown(&self.dest, &abs))(err));
                    }
                    self.not_folders.remove(&key);
                    self.summary.dirs += 1;
                    made = true;
                }
            }
            self.safe_dirs.insert(key);
        }
        Ok(())
    }

    /// Follows `link`, relative to the folder `from` (both inside the
    /// destination), as the kernel would, through the links already on
    /// disk; `Err` when it leaves the destination at any point, is
    /// absolute, loops, or walks more than [`MAX_WALK`] parts. Returns the
    /// key of every path it passed through but the last, so later links
    /// there can be refused.
    ///
    /// This is the rule, not a lexical guess: `..` after a link climbs
    /// from the link's target, which is how a chain of two links each
    /// harmless as text can reach a host file. Its cost is linear in the
    /// parts walked: each part's key is built from its parent's, and a
    /// path is only looked at on disk when nothing known answers (not a
    /// folder already checked, not below a missing path or a file).
    fn resolve_inside(&mut self, from: &Path, link: &Path) -> Result<Vec<PathKey>, String> {
        // The walk's position: the key of each part so far, and the path.
        let mut at: Vec<PathKey> = Vec::new();
        let mut here = PathBuf::new();
        for part in from.iter() {
            at.push(
                self.keys
                    .child(at.last().copied().unwrap_or_default(), part),
            );
            here.push(part);
        }
        // The depth at which the walk met a path that is not a folder:
        // nothing below it exists, so deeper parts are walked as text.
        let mut not_folder_at: Option<usize> = None;
        let mut passed = Vec::new();
        let (mut hops, mut walked) = (0usize, 0usize);
        // Components still to walk, last first.
        let mut queue: Vec<OsString> = Vec::new();
        push_components(&mut queue, link)?;
        while let Some(part) = queue.pop() {
            walked += 1;
            if walked > MAX_WALK {
                return Err(format!("it walks more than {MAX_WALK} path parts"));
            }
            if part == ".." {
                if at.pop().is_none() {
                    return Err("it leads outside the destination".into());
                }
                here.pop();
                if not_folder_at.is_some_and(|depth| at.len() < depth) {
                    not_folder_at = None;
                }
                continue;
            }
            if part == "." {
                continue;
            }
            let key = self
                .keys
                .child(at.last().copied().unwrap_or_default(), &part);
            at.push(key);
            here.push(&part);
            if !queue.is_empty() {
                passed.push(key);
            }
            if not_folder_at.is_some() || self.safe_dirs.contains(&key) {
                continue;
            }
            if self.not_folders.contains(&key) {
                not_folder_at = Some(at.len());
                continue;
            }
            match std::fs::symlink_metadata(self.dest.join(&here)) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    hops += 1;
                    if hops > MAX_HOPS {
                        return Err("too many levels of links".into());
                    }
                    let next = std::fs::read_link(self.dest.join(&here))
                        .map_err(|e| format!("reading link {}: {e}", here.display()))?;
                    at.pop();
                    here.pop();
                    push_components(&mut queue, &next)?;
                }
                Ok(meta) if meta.file_type().is_dir() => self.safe_dirs.insert(key),
                // A file, or nothing yet: walk on as text; what is created
                // later at a passed-through path is checked then.
                _ => {
                    self.not_folders.insert(key);
                    not_folder_at = Some(at.len());
                }
            }
        }
        Ok(passed)
    }
}

#[cfg(test)]
mod tests;
