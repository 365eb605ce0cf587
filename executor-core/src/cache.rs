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

use crate::ExecutorError;

mod spec;

pub use spec::{validate_key, CacheResult, CacheSpec, Trust};

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
mod tests;
