//! Every filesystem write of one unpack, in archive order, on one blocking
//! thread; refused entries are recorded, not written.

use std::collections::HashSet;
use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;

use super::{Op, UnpackError, UnpackSummary};

/// How many links one resolution may follow, as the kernel's `ELOOP`.
const MAX_HOPS: usize = 40;

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
    /// Folders (relative) already checked to be real folders, not links.
    safe_dirs: HashSet<PathBuf>,
    /// Every path an unpacked link's target passes through (not its last
    /// component): a link created there later would change where that
    /// earlier link points, after it was checked.
    traversed: HashSet<PathBuf>,
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
            safe_dirs: HashSet::new(),
            traversed: HashSet::new(),
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

    fn io_err(&self, raw: &str) -> impl Fn(io::Error) -> Skip + '_ {
        let raw = raw.to_string();
        move |source| {
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
                if self.traversed.contains(&rel) {
                    return Err(Skip::Refused(format!(
                        "an earlier link points through {}; a link there would move it",
                        rel.display()
                    )));
                }
                self.replaceable(&rel)?;
                let parent = rel.parent().map(Path::to_path_buf).unwrap_or_default();
                let passes = resolve_inside(&self.dest, &parent, &link).map_err(|why| {
                    Skip::Refused(format!("symlink to {}: {why}", link.display()))
                })?;
                self.count()?;
                let target = self.dest.join(&rel);
                remove_non_dir(&target).map_err(self.io_err(&raw))?;
                std::os::unix::fs::symlink(&link, &target).map_err(self.io_err(&raw))?;
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
                    return Err(Skip::Refused(format!(
                        "would write through symlink {}",
                        prefix.display()
                    )))
                }
                Ok(_) => {
                    return Err(Skip::Refused(format!(
                        "{} is a file, not a folder",
                        prefix.display()
                    )))
                }
                Err(_) => {
                    self.count()?;
                    std::fs::create_dir(&abs)
                        .map_err(self.io_err(&prefix.display().to_string()))?;
                    self.summary.dirs += 1;
                }
            }
            self.safe_dirs.insert(prefix.clone());
        }
        Ok(())
    }
}

/// Follows `link`, relative to the folder `from` (both inside `root`), as
/// the kernel would, through the links already on disk; `Err` when it
/// leaves `root` at any point, is absolute, or loops. Returns every path it
/// passed through but the last, so later links there can be refused.
///
/// This is the rule, not a lexical guess: `..` after a link climbs from
/// the link's target, which is how a chain of two links each harmless as
/// text can reach a host file.
fn resolve_inside(root: &Path, from: &Path, link: &Path) -> Result<Vec<PathBuf>, String> {
    let mut at: Vec<OsString> = from.iter().map(|c| c.to_os_string()).collect();
    let mut passed = Vec::new();
    let mut hops = 0usize;
    // Components still to walk, last first.
    let mut queue: Vec<OsString> = Vec::new();
    push_components(&mut queue, link)?;
    while let Some(part) = queue.pop() {
        if part == ".." {
            if at.pop().is_none() {
                return Err("it leads outside the destination".into());
            }
            continue;
        }
        if part == "." {
            continue;
        }
        at.push(part);
        let here: PathBuf = at.iter().collect();
        let last = queue.is_empty();
        if !last {
            passed.push(here.clone());
        }
        match std::fs::symlink_metadata(root.join(&here)) {
            Ok(meta) if meta.file_type().is_symlink() => {
                hops += 1;
                if hops > MAX_HOPS {
                    return Err("too many levels of links".into());
                }
                let next = std::fs::read_link(root.join(&here))
                    .map_err(|e| format!("reading link {}: {e}", here.display()))?;
                at.pop();
                push_components(&mut queue, &next)?;
            }
            // A folder, a file, or nothing yet: walk on as text; what is
            // created later at a passed-through path is checked then.
            _ => {}
        }
    }
    Ok(passed)
}

/// Pushes `path`'s components onto `queue` so the first is popped first.
fn push_components(queue: &mut Vec<OsString>, path: &Path) -> Result<(), String> {
    let mut parts = Vec::new();
    for component in path.components() {
        match component {
            Component::Normal(p) => parts.push(p.to_os_string()),
            Component::CurDir => {}
            Component::ParentDir => parts.push(OsString::from("..")),
            Component::RootDir | Component::Prefix(_) => {
                return Err(format!("it is absolute ({})", path.display()))
            }
        }
    }
    queue.extend(parts.into_iter().rev());
    Ok(())
}

/// The archive path an operation names, for the refusal record.
fn op_raw(op: &Op) -> String {
    match op {
        Op::Dir { raw, .. }
        | Op::File { raw, .. }
        | Op::Symlink { raw, .. }
        | Op::HardLink { raw, .. }
        | Op::Refused { raw, .. } => raw.clone(),
        Op::Data(_) | Op::EndFile | Op::Root => String::new(),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_through_an_unpacked_link_is_followed() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("d")).unwrap();
        std::os::unix::fs::symlink("..", root.path().join("d/up")).unwrap();
        // As text "d/up/.." stays inside; on disk d/up is the root, and
        // its parent is outside.
        assert!(resolve_inside(root.path(), Path::new(""), Path::new("d/up/../x")).is_err());
        let passed = resolve_inside(root.path(), Path::new(""), Path::new("d/up/d")).unwrap();
        assert_eq!(passed, vec![PathBuf::from("d"), PathBuf::from("d/up")]);
    }

    #[test]
    fn loops_are_refused() {
        let root = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("b", root.path().join("a")).unwrap();
        std::os::unix::fs::symlink("a", root.path().join("b")).unwrap();
        let err = resolve_inside(root.path(), Path::new(""), Path::new("a")).unwrap_err();
        assert!(err.contains("levels"), "{err}");
    }
}
