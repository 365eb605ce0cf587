//! Run roots: one private folder per run, owned by a lock the run holds.

use std::fs::File;
use std::path::{Path, PathBuf};

use executor_core::labels::{dns_name, label_value};
use executor_core::{ExecutorError, RunSpec};
use nix::fcntl::{Flock, FlockArg};

/// File in every run root that the live run holds an exclusive lock on.
const LOCK_FILE: &str = ".lock";
/// File in every run root describing its owner, for people inspecting leftovers.
const OWNER_FILE: &str = "owner.json";

/// A run root this process owns; dropping it releases the lock.
pub(crate) struct RunRoot {
    pub path: PathBuf,
    /// The mark every process of the run carries; see [`crate::marked`].
    pub mark: String,
    /// `None` only for a root that exists on no host (dry-run, mocks).
    _lock: Option<Flock<File>>,
}

impl std::fmt::Debug for RunRoot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunRoot")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl RunRoot {
    /// A root that no lock holds: what a dry-run or a mock host gives.
    pub fn unlocked(path: PathBuf, mark: String) -> Self {
        RunRoot {
            path,
            mark,
            _lock: None,
        }
    }

    pub fn work(&self) -> PathBuf {
        self.path.join("work")
    }
    pub fn steps(&self) -> PathBuf {
        self.path.join("steps")
    }
    pub fn outputs(&self) -> PathBuf {
        self.path.join("outputs")
    }
}

/// The folder holding every run root of `runner`.
pub(crate) fn runner_dir(base: &Path, runner: &str) -> PathBuf {
    base.join(label_value(runner))
}

/// Creates `dir` (and missing parents) private to this user, then checks
/// that nobody else can have put or replace anything on its path.
pub(crate) fn prepare_private(dir: &Path) -> Result<(), ExecutorError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| ExecutorError::io("creating the run folders' base", dir, e))?;
    check_private(dir)
}

/// As ssh's StrictModes: every folder on the way to `dir`, and `dir`
/// itself, belongs to root or this user, and none that another user may
/// write to lacks the sticky bit; every symlink on the way belongs to root
/// or this user; `dir` is this user's and writable by nobody else. Another
/// local user then cannot own a run folder, plant one, or point the base
/// somewhere else (a symlink in the shared `/tmp`).
pub(crate) fn check_private(dir: &Path) -> Result<(), ExecutorError> {
    use std::os::unix::fs::MetadataExt;
    let me = nix::unistd::geteuid().as_raw();
    let unsafe_path = |path: &Path, why: String| {
        Err(ExecutorError::InvalidInput(format!(
            "the run folders' base {} is not private: {} {why}; use a folder only this user \
             can change (the default is under $XDG_RUNTIME_DIR, else a 0700 folder in the \
             temp folder)",
            dir.display(),
            path.display()
        )))
    };
    let trusted = |uid: u32| uid == 0 || uid == me;
    let mut walked = std::path::PathBuf::new();
    for part in dir.components() {
        walked.push(part);
        let meta = std::fs::symlink_metadata(&walked)
            .map_err(|e| ExecutorError::io("checking the run folders' base", &walked, e))?;
        if meta.file_type().is_symlink() && !trusted(meta.uid()) {
            return unsafe_path(&walked, format!("is a symlink of user {}", meta.uid()));
        }
    }
    let real = dir
        .canonicalize()
        .map_err(|e| ExecutorError::io("checking the run folders' base", dir, e))?;
    let mut walked = std::path::PathBuf::new();
    for part in real.components() {
        walked.push(part);
        let meta = std::fs::metadata(&walked)
            .map_err(|e| ExecutorError::io("checking the run folders' base", &walked, e))?;
        let last = walked == real;
        if !trusted(meta.uid()) || (last && meta.uid() != me) {
            return unsafe_path(&walked, format!("belongs to user {}", meta.uid()));
        }
        let others_write = meta.mode() & 0o022 != 0;
        let sticky = meta.mode() & 0o1000 != 0;
        if others_write && (last || !sticky) {
            return unsafe_path(
                &walked,
                format!(
                    "can be written by other users (mode {:o})",
                    meta.mode() & 0o7777
                ),
            );
        }
    }
    Ok(())
}

/// Creates a fresh, locked run root for `spec` under `base`.
pub(crate) fn create(base: &Path, spec: &RunSpec) -> Result<RunRoot, ExecutorError> {
    prepare_private(base)?;
    let parent = runner_dir(base, &spec.runner);
    prepare_private(&parent)?;
    let prefix = format!("{}-", dns_name(&[&spec.name], 40));
    use std::os::unix::fs::PermissionsExt;
    let path = tempfile::Builder::new()
        .prefix(&prefix)
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir_in(&parent)
        .map_err(|e| ExecutorError::io("creating the run folder", &parent, e))?
        .keep();
    let mut root = lock_new(&path).inspect_err(|_| {
        let _ = std::fs::remove_dir_all(&path);
    })?;
    let owner = serde_json::json!({
        "runner": spec.runner,
        "run": spec.name,
        "pid": std::process::id(),
    });
    root.mark = crate::marked::new_mark();
    let setup = || -> std::io::Result<()> {
        std::fs::write(path.join(OWNER_FILE), owner.to_string())?;
        std::fs::write(path.join(crate::marked::MARK_FILE), &root.mark)?;
        for dir in ["work", "steps", "outputs"] {
            std::fs::create_dir(path.join(dir))?;
        }
        Ok(())
    };
    if let Err(e) = setup() {
        let _ = std::fs::remove_dir_all(&path);
        return Err(ExecutorError::io("preparing the run folder", &path, e));
    }
    Ok(root)
}

fn lock_new(path: &Path) -> Result<RunRoot, ExecutorError> {
    let lock_path = path.join(LOCK_FILE);
    let file = File::create(&lock_path)
        .map_err(|e| ExecutorError::io("creating the run lock", &lock_path, e))?;
    let lock = Flock::lock(file, FlockArg::LockExclusiveNonblock).map_err(|(_, errno)| {
        ExecutorError::io("locking the run folder", &lock_path, errno.into())
    })?;
    Ok(RunRoot {
        path: path.to_path_buf(),
        mark: String::new(),
        _lock: Some(lock),
    })
}

/// Whether a live process holds the root's lock.
fn is_live(root: &Path) -> bool {
    let Ok(file) = File::open(root.join(LOCK_FILE)) else {
        // No lock file: the run died before it could take one.
        return false;
    };
    Flock::lock(file, FlockArg::LockSharedNonblock).is_err()
}

/// Every run root of `runner`, live or not.
pub(crate) fn list(base: &Path, runner: &str) -> Vec<PathBuf> {
    let dir = runner_dir(base, runner);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut roots: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    roots.sort();
    roots
}

/// Removes the run roots of `runner` whose owner is gone.
///
/// A run root is live exactly while its run holds the lock, so there is no
/// expiry to guess: a root whose lock is free belongs to a crashed run.
pub(crate) fn remove_dead(base: &Path, runner: &str) -> Result<Vec<String>, ExecutorError> {
    let mut removed = Vec::new();
    let dir = runner_dir(base, runner);
    if !dir.exists() {
        return Ok(removed);
    }
    // Never delete, or signal, by what another user could have put there.
    check_private(&dir)?;
    for root in list(base, runner) {
        if is_live(&root) {
            continue;
        }
        // The crashed run's processes first: a step's `setsid sleep &`
        // outlives the runner that started it.
        if let Some(mark) = crate::marked::read_mark(&root) {
            crate::marked::kill_marked(&mark);
        }
        remove(&root)?;
        tracing::info!(root = %root.display(), "removed a crashed run's folder");
        removed.push(root.display().to_string());
    }
    Ok(removed)
}

/// Removes a run root, making read-only folders a step left writable first.
pub(crate) fn remove(root: &Path) -> Result<(), ExecutorError> {
    match std::fs::remove_dir_all(root) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(_) => {
            make_writable(root);
            std::fs::remove_dir_all(root)
                .map_err(|e| ExecutorError::io("removing the run folder", root, e))
        }
    }
}

/// Folders a step made read-only would stop `remove_dir_all`; open them up
/// top-down (a folder must be writable before its children can be listed
/// and changed).
fn make_writable(root: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    pending.push(entry.path());
                }
            }
        }
    }
}
