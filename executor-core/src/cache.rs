//! Run caches kept on the runner's host: streamed into the environment
//! before the first step, and back after the last step succeeds.
//!
//! A tenant cluster that scales to zero has no volume or object store, so
//! the runner carries the cache through the same tar streaming as the
//! checkout. On disk a cache is `<dir>/<key>/current`, a symlink to one
//! `data-*` folder; a save fills a new folder and swaps the link with an
//! atomic rename, so a crash or a failed save never leaves a half-written
//! cache: the old copy stays until the new one is whole.

use std::fs::File;
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use crate::ExecutorError;

/// One cache of a run: host copy `key`, environment folder `path`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheSpec {
    /// The cache's name on the host.
    pub key: String,
    /// Where it lives in the environment: absolute, or relative to `WORK_DIR`.
    pub path: String,
}

impl CacheSpec {
    /// Parses `KEY=PATH` as given to `--cache`, checking the key.
    ///
    /// ```
    /// let c = executor_core::CacheSpec::parse("cargo=/root/.cargo").unwrap();
    /// assert_eq!((c.key.as_str(), c.path.as_str()), ("cargo", "/root/.cargo"));
    /// assert!(executor_core::CacheSpec::parse("../x=/a").is_err());
    /// ```
    ///
    /// # Errors
    /// [`ExecutorError::InvalidInput`] for text without `=`, an empty path, or
    /// a key [`validate_key`] refuses.
    pub fn parse(text: &str) -> Result<Self, ExecutorError> {
        let (key, path) = text.split_once('=').ok_or_else(|| {
            ExecutorError::InvalidInput(format!(
                "cache {text:?} is not KEY=PATH (e.g. cargo=/root/.cargo)"
            ))
        })?;
        validate_key(key)?;
        if path.is_empty() {
            return Err(ExecutorError::InvalidInput(format!(
                "cache {text:?} has an empty path"
            )));
        }
        Ok(CacheSpec {
            key: key.to_string(),
            path: path.to_string(),
        })
    }

    /// The cache's folder in an environment whose work folder is `work_dir`.
    pub fn resolve(&self, work_dir: &str) -> String {
        if self.path.starts_with('/') {
            self.path.clone()
        } else {
            format!("{}/{}", work_dir.trim_end_matches('/'), self.path)
        }
    }
}

/// Checks a cache key: not empty, no `/`, no `..`, not starting with `.`
/// (names starting with a dot are the store's own), letters, digits, `.`,
/// `-` and `_` only.
///
/// # Errors
/// [`ExecutorError::InvalidInput`] saying which rule the key breaks.
pub fn validate_key(key: &str) -> Result<(), ExecutorError> {
    let bad = |why: &str| {
        Err(ExecutorError::InvalidInput(format!(
            "cache key {key:?} {why}; use letters, digits, '.', '-' and '_'"
        )))
    };
    if key.is_empty() {
        return bad("is empty");
    }
    if key.contains('/') || key.contains('\\') {
        return bad("contains a slash");
    }
    if key == "." || key == ".." || key.contains("..") {
        return bad("contains ..");
    }
    if key.starts_with('.') {
        return bad("starts with a dot");
    }
    if !key
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
    {
        return bad("has other characters");
    }
    Ok(())
}

/// What happened to one cache in a run, as the result JSON records it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CacheResult {
    /// The key.
    pub key: String,
    /// The folder in the environment.
    pub path: String,
    /// Whether a host copy existed and was restored.
    pub hit: bool,
    /// Bytes restored into the environment.
    pub size_in: u64,
    /// Bytes brought back, when saved.
    pub size_out: u64,
    /// Milliseconds restoring.
    pub ms_in: u64,
    /// Milliseconds bringing it back (the copy out of the environment; not
    /// the removal of the host copy it replaces).
    pub ms_out: u64,
    /// Whether the host copy was replaced.
    pub saved: bool,
    /// The namespace this run saves into: `trusted`, or `untrusted` for a
    /// run of untrusted code, whose saves trusted runs never read.
    pub namespace: Trust,
    /// The namespace of the copy restored, when one was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restored_from: Option<Trust>,
    /// Why it was not restored or saved, when it was not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Whether a run's code is trusted, which decides the cache namespace it
/// saves into.
///
/// A run of untrusted code (a pull request, a job from a shared queue) may
/// restore the trusted copy of a cache but saves only into its own
/// namespace, which trusted runs never read: otherwise a pull request
/// could plant code in a cache that the next trusted run executes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Trust {
    /// Code from the repository's own branches.
    #[default]
    Trusted,
    /// Code from outside (a pull request, a shared queue).
    Untrusted,
}

/// The host side of every cache: one folder per key under `dir`; the
/// saves of untrusted runs under `dir/.untrusted`. Seen for a runner
/// ([`CacheStore::for_runner`], as the driver sees it), both are under
/// `dir/runners/ID`, ID a digest of the runner's DID: runners that share
/// a cache folder never read or overwrite each other's caches.
#[derive(Debug, Clone)]
pub struct CacheStore {
    dir: PathBuf,
    /// Largest cache saved, in bytes.
    pub max_bytes: u64,
    /// Saves go to a scratch folder and are thrown away (for `--dry-run`).
    discard_saves: bool,
    /// The namespace this view reads first and saves into.
    trust: Trust,
}

/// A save in progress: fill [`folder`](PendingSave::folder), then
/// [`commit`](CacheStore::commit) it; dropping it discards the new copy.
#[derive(Debug)]
pub struct PendingSave {
    key: String,
    folder: PathBuf,
    committed: bool,
    /// Held while the save is in progress, so no other commit removes it.
    _busy: Option<Flock<File>>,
    busy_path: PathBuf,
}

impl PendingSave {
    /// The folder to unpack the new copy into.
    pub fn folder(&self) -> &Path {
        &self.folder
    }
}

fn busy_file(folder: &Path) -> PathBuf {
    folder.with_extension("busy")
}

impl Drop for PendingSave {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_dir_all(&self.folder);
        }
        let _ = std::fs::remove_file(&self.busy_path);
    }
}

impl CacheStore {
    /// A store under `dir` (created when first saved to).
    pub fn new(dir: impl Into<PathBuf>, max_bytes: u64) -> Self {
        CacheStore {
            dir: dir.into(),
            max_bytes,
            discard_saves: false,
            trust: Trust::Trusted,
        }
    }

    /// A store that reads `dir` but never writes it: every save lands in a
    /// scratch folder and is thrown away. For dry-runs, which must touch nothing.
    pub fn read_only(dir: impl Into<PathBuf>, max_bytes: u64) -> Self {
        CacheStore {
            discard_saves: true,
            ..Self::new(dir, max_bytes)
        }
    }

    /// The default folder: `$XDG_CACHE_HOME/knotless-runner/caches`, else
    /// `~/.cache/knotless-runner/caches`.
    pub fn default_dir() -> PathBuf {
        let base = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .unwrap_or_else(std::env::temp_dir);
        base.join("knotless-runner").join("caches")
    }

    /// The same store seen from a run of `trust`: where its saves go.
    ///
    /// ```
    /// use executor_core::{cache::Trust, CacheStore};
    /// let store = CacheStore::new("/var/cache/ci", 1 << 30);
    /// let untrusted = store.namespace(Trust::Untrusted);
    /// assert_eq!(untrusted.trust(), Trust::Untrusted);
    /// ```
    pub fn namespace(&self, trust: Trust) -> CacheStore {
        CacheStore {
            trust,
            ..self.clone()
        }
    }

    /// The same store seen for the runner `did`: its own folder, named by
    /// a digest of the DID as it is (never a sanitised form two DIDs could
    /// share), so another runner's caches are neither read nor replaced.
    ///
    /// ```
    /// use executor_core::CacheStore;
    /// let store = CacheStore::new("/var/cache/ci", 1 << 30);
    /// let a = store.for_runner("did:plc:a");
    /// assert_ne!(a.dir(), store.for_runner("did:plc:b").dir());
    /// assert!(a.dir().starts_with("/var/cache/ci/runners"));
    /// ```
    pub fn for_runner(&self, did: &str) -> CacheStore {
        use sha2::Digest;
        let id = hex::encode(&sha2::Sha256::digest(did.as_bytes())[..16]);
        CacheStore {
            dir: self.dir.join("runners").join(id),
            ..self.clone()
        }
    }

    /// The folder this view of the store keeps its caches in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The namespace this view of the store reads and writes.
    pub fn trust(&self) -> Trust {
        self.trust
    }

    fn key_dir(&self, key: &str) -> PathBuf {
        match self.trust {
            Trust::Trusted => self.dir.join(key),
            Trust::Untrusted => self.dir.join(".untrusted").join(key),
        }
    }

    fn lock(&self, key: &str, arg: FlockArg) -> Result<Flock<File>, ExecutorError> {
        let dir = self.key_dir(key);
        std::fs::create_dir_all(&dir)
            .map_err(|e| ExecutorError::io("creating the cache folder", &dir, e))?;
        let path = dir.join("lock");
        let file = File::create(&path)
            .map_err(|e| ExecutorError::io("opening the cache lock", &path, e))?;
        Flock::lock(file, arg)
            .map_err(|(_, e)| ExecutorError::io("locking the cache", &path, e.into()))
    }

    /// The current host copy of `key` in this namespace, if any, with a
    /// shared lock held for as long as the guard lives so no save deletes
    /// it meanwhile. A read-only store takes the lock only if its file
    /// exists, and creates nothing.
    ///
    /// # Errors
    /// [`ExecutorError::InvalidInput`] for a key [`validate_key`] refuses; `Io`
    /// when the store's folders or lock file cannot be made or locked.
    pub fn current(&self, key: &str) -> Result<Option<(PathBuf, Flock<File>)>, ExecutorError> {
        validate_key(key)?;
        let link = self.key_dir(key).join("current");
        if std::fs::symlink_metadata(&link).is_err() {
            return Ok(None);
        }
        let guard = if self.discard_saves {
            let path = self.key_dir(key).join("lock");
            let Ok(file) = File::open(&path) else {
                return Ok(None);
            };
            Flock::lock(file, FlockArg::LockShared)
                .map_err(|(_, e)| ExecutorError::io("locking the cache", &path, e.into()))?
        } else {
            self.lock(key, FlockArg::LockShared)?
        };
        match std::fs::read_link(&link) {
            Ok(target) => Ok(Some((self.key_dir(key).join(target), guard))),
            Err(_) => Ok(None),
        }
    }

    /// The copy of `key` a run of this namespace restores, and the
    /// namespace it came from: its own copy, else (for an untrusted run)
    /// the trusted one. A trusted run never reads an untrusted copy.
    ///
    /// # Errors
    /// As [`CacheStore::current`].
    #[allow(clippy::type_complexity)]
    pub fn restorable(
        &self,
        key: &str,
    ) -> Result<Option<(PathBuf, Flock<File>, Trust)>, ExecutorError> {
        if let Some((dir, guard)) = self.current(key)? {
            return Ok(Some((dir, guard, self.trust)));
        }
        if self.trust == Trust::Untrusted {
            let trusted = self.namespace(Trust::Trusted);
            if let Some((dir, guard)) = trusted.current(key)? {
                return Ok(Some((dir, guard, Trust::Trusted)));
            }
        }
        Ok(None)
    }

    /// Starts a save of `key` into a fresh folder beside the current copy.
    ///
    /// The save's busy mark is created and locked before its folder, so a
    /// concurrent commit, which removes every idle copy, never sees the
    /// folder without its lock. A read-only store's save goes to a scratch
    /// path outside the store that nothing creates unless written to.
    ///
    /// # Errors
    /// [`ExecutorError::InvalidInput`] for a key [`validate_key`] refuses; `Io`
    /// when the save's folder or busy mark cannot be made or locked.
    pub fn begin_save(&self, key: &str) -> Result<PendingSave, ExecutorError> {
        validate_key(key)?;
        if self.discard_saves {
            let folder = std::env::temp_dir().join(format!(
                "knotless-dry-run-cache-{}",
                crate::labels::random_hex(8)
            ));
            let busy_path = busy_file(&folder);
            return Ok(PendingSave {
                key: key.to_string(),
                folder,
                committed: false,
                _busy: None,
                busy_path,
            });
        }
        let dir = self.key_dir(key);
        std::fs::create_dir_all(&dir)
            .map_err(|e| ExecutorError::io("creating the cache folder", &dir, e))?;
        let (file, busy_path) = tempfile::Builder::new()
            .prefix("data-")
            .suffix(".busy")
            .tempfile_in(&dir)
            .map_err(|e| ExecutorError::io("marking a cache save", &dir, e))?
            .keep()
            .map_err(|e| ExecutorError::io("marking a cache save", &dir, e.error))?;
        let busy = Flock::lock(file, FlockArg::LockExclusiveNonblock)
            .map_err(|(_, e)| ExecutorError::io("marking a cache save", &busy_path, e.into()));
        let busy = match busy {
            Ok(b) => b,
            Err(e) => {
                let _ = std::fs::remove_file(&busy_path);
                return Err(e);
            }
        };
        let folder = busy_path.with_extension("");
        if let Err(e) = std::fs::create_dir(&folder) {
            let _ = std::fs::remove_file(&busy_path);
            return Err(ExecutorError::io("creating a cache copy", &folder, e));
        }
        Ok(PendingSave {
            key: key.to_string(),
            folder,
            committed: false,
            _busy: Some(busy),
            busy_path,
        })
    }

    /// Makes a filled save the current copy (atomic rename of the link)
    /// and removes older copies. The last writer wins.
    ///
    /// # Errors
    /// `Io` when the link cannot be swapped in; the save is then discarded and
    /// the current copy stays as it was.
    pub fn commit(&self, mut save: PendingSave) -> Result<(), ExecutorError> {
        if self.discard_saves {
            // Dropping the save removes its scratch folder.
            return Ok(());
        }
        let dir = self.key_dir(&save.key);
        let _guard = self.lock(&save.key, FlockArg::LockExclusive)?;
        let name = save.folder.file_name().map(PathBuf::from).ok_or_else(|| {
            ExecutorError::io(
                "naming a cache copy",
                &save.folder,
                std::io::ErrorKind::InvalidInput.into(),
            )
        })?;
        let tmp_link = dir.join(format!("current.{}", name.display()));
        let _ = std::fs::remove_file(&tmp_link);
        std::os::unix::fs::symlink(&name, &tmp_link)
            .map_err(|e| ExecutorError::io("linking the cache copy", &tmp_link, e))?;
        std::fs::rename(&tmp_link, dir.join("current"))
            .map_err(|e| ExecutorError::io("swapping the cache copy", &dir, e))?;
        save.committed = true;
        // Older copies and those of crashed saves go now; a save still in
        // progress holds its busy lock and stays. The exclusive lock keeps
        // readers of the old copy safe until they are done.
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for entry in entries.flatten() {
                let file = entry.file_name();
                let file = file.to_string_lossy();
                if !file.starts_with("data-") || *file == *name.to_string_lossy() {
                    continue;
                }
                if file.ends_with(".busy") {
                    // The mark of a save that crashed before its folder existed.
                    let orphan = !entry.path().with_extension("").exists();
                    let idle = File::open(entry.path())
                        .is_ok_and(|f| Flock::lock(f, FlockArg::LockExclusiveNonblock).is_ok());
                    if orphan && idle {
                        let _ = std::fs::remove_file(entry.path());
                    }
                    continue;
                }
                let busy = busy_file(&entry.path());
                let idle = match File::open(&busy) {
                    Ok(f) => Flock::lock(f, FlockArg::LockExclusiveNonblock).is_ok(),
                    Err(_) => true,
                };
                if idle {
                    let _ = std::fs::remove_dir_all(entry.path());
                    let _ = std::fs::remove_file(&busy);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn save_swaps_atomically_and_a_crashed_save_leaves_the_old_copy() {
        let dir = tempfile::tempdir().unwrap();
        let store = CacheStore::new(dir.path(), u64::MAX);
        assert!(store.current("k").unwrap().is_none());
        let save = store.begin_save("k").unwrap();
        std::fs::write(save.folder().join("f"), "one").unwrap();
        store.commit(save).unwrap();
        let (path, guard) = store.current("k").unwrap().unwrap();
        assert_eq!(std::fs::read_to_string(path.join("f")).unwrap(), "one");
        drop(guard);

        // A save that never commits (a crash, a refused tar) is discarded.
        let save = store.begin_save("k").unwrap();
        std::fs::write(save.folder().join("f"), "half").unwrap();
        drop(save);
        let (path, _g) = store.current("k").unwrap().unwrap();
        assert_eq!(std::fs::read_to_string(path.join("f")).unwrap(), "one");
    }

    #[test]
    fn a_commit_never_removes_another_save_in_progress() {
        let dir = tempfile::tempdir().unwrap();
        let store = CacheStore::new(dir.path(), u64::MAX);
        let slow = store.begin_save("k").unwrap();
        let fast = store.begin_save("k").unwrap();
        std::fs::write(fast.folder().join("f"), "fast").unwrap();
        store.commit(fast).unwrap();
        assert!(
            slow.folder().is_dir(),
            "the commit removed a save in progress"
        );
        std::fs::write(slow.folder().join("f"), "slow").unwrap();
        store.commit(slow).unwrap();
        let (path, _g) = store.current("k").unwrap().unwrap();
        assert_eq!(std::fs::read_to_string(path.join("f")).unwrap(), "slow");
    }

    #[test]
    fn a_save_is_locked_before_its_folder_exists() {
        let dir = tempfile::tempdir().unwrap();
        let store = CacheStore::new(dir.path(), u64::MAX);
        let save = store.begin_save("k").unwrap();
        let busy = busy_file(save.folder());
        let held = File::open(&busy).unwrap();
        assert!(
            Flock::lock(held, FlockArg::LockExclusiveNonblock).is_err(),
            "the save's folder exists without its lock held"
        );
        // A crash between the mark and the folder leaves only the mark,
        // which the next commit removes.
        let orphan = dir.path().join("k/data-orphan.busy");
        std::fs::write(&orphan, "").unwrap();
        store.commit(save).unwrap();
        assert!(!orphan.exists());
    }

    #[test]
    fn untrusted_saves_are_never_read_by_trusted_runs() {
        let dir = tempfile::tempdir().unwrap();
        let trusted = CacheStore::new(dir.path(), u64::MAX);
        let save = trusted.begin_save("k").unwrap();
        std::fs::write(save.folder().join("f"), "good").unwrap();
        trusted.commit(save).unwrap();

        let untrusted = trusted.namespace(Trust::Untrusted);
        let (path, _g, from) = untrusted.restorable("k").unwrap().unwrap();
        assert_eq!(from, Trust::Trusted);
        assert_eq!(std::fs::read_to_string(path.join("f")).unwrap(), "good");
        drop(_g);
        let save = untrusted.begin_save("k").unwrap();
        std::fs::write(save.folder().join("f"), "planted").unwrap();
        untrusted.commit(save).unwrap();

        let (path, _g, from) = trusted.restorable("k").unwrap().unwrap();
        assert_eq!(from, Trust::Trusted);
        assert_eq!(std::fs::read_to_string(path.join("f")).unwrap(), "good");
        let (path, _g2, from) = untrusted.restorable("k").unwrap().unwrap();
        assert_eq!(from, Trust::Untrusted);
        assert_eq!(std::fs::read_to_string(path.join("f")).unwrap(), "planted");
    }

    #[test]
    fn a_read_only_store_creates_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = CacheStore::read_only(dir.path().join("caches"), u64::MAX);
        assert!(store.current("k").unwrap().is_none());
        let save = store.begin_save("k").unwrap();
        store.commit(save).unwrap();
        assert!(!dir.path().join("caches").exists());
    }

    #[test]
    fn keys_are_checked() {
        for bad in ["", "a/b", "..", "a..b", "sp ace", ".untrusted"] {
            assert!(validate_key(bad).is_err(), "{bad}");
        }
        assert!(validate_key("cargo-registry_1.2").is_ok());
    }
}
