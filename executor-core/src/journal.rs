//! Environments a run could not remove, kept on the host until one can.
//!
//! When `stop` fails (the engine or API server stayed unreachable past
//! every retry), the driver writes the environment to the journal; the
//! next run or cleanup of that runner calls [`Journal::sweep`], which
//! stops each one again and forgets those that are gone. A Job left on a
//! cluster keeps a node from scaling to zero; this is what gives it back.
//!
//! One file per environment, written whole (a temporary file and a
//! rename), so concurrent runners need no lock: two sweeps may both stop
//! the same environment, and stopping one that is gone is `Ok`.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), executor_core::ExecutorError> {
//! use executor_core::journal::{Journal, Leftover};
//! let dir = tempfile::tempdir().unwrap();
//! let journal = Journal::new(dir.path());
//! journal.record(&Leftover::new("k8s", "did:plc:r", "knotless-build-1-abc", "stop: connection refused"))?;
//! assert_eq!(journal.entries("k8s", "did:plc:r")?.len(), 1);
//! # Ok(()) }
//! ```

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::{Executor, ExecutorError, RunHandle};

/// One environment a run could not remove.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Leftover {
    /// The backend's name ([`Executor::kind`]).
    pub executor: String,
    /// The runner that made it.
    pub runner: String,
    /// The backend's id of the environment ([`RunHandle::id`]).
    pub id: String,
    /// Unix seconds when it was recorded.
    pub since: u64,
    /// Why it could not be removed then.
    pub why: String,
}

impl Leftover {
    /// A leftover recorded now.
    pub fn new(
        executor: impl Into<String>,
        runner: impl Into<String>,
        id: impl Into<String>,
        why: impl Into<String>,
    ) -> Self {
        Leftover {
            executor: executor.into(),
            runner: runner.into(),
            id: id.into(),
            since: crate::labels::unix_now(),
            why: why.into(),
        }
    }
}

/// A folder of [`Leftover`]s.
#[derive(Debug, Clone)]
pub struct Journal {
    dir: PathBuf,
}

impl Journal {
    /// The journal kept in `dir` (created when the first entry is written).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Journal { dir: dir.into() }
    }

    /// Where the journal is.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn file_of(&self, executor: &str, id: &str) -> PathBuf {
        let digest = Sha256::digest(format!("{executor}\0{id}").as_bytes());
        self.dir
            .join(format!("{}.json", hex::encode(&digest[..16])))
    }

    /// Writes `leftover` to the journal, whole.
    ///
    /// # Errors
    /// `Io` naming the file when the folder or the file cannot be written.
    pub fn record(&self, leftover: &Leftover) -> Result<(), ExecutorError> {
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| ExecutorError::io("creating the journal", &self.dir, e))?;
        let path = self.file_of(&leftover.executor, &leftover.id);
        let tmp = path.with_extension("json.tmp");
        let text = serde_json::to_string(leftover).unwrap_or_default();
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|e| ExecutorError::io("writing the journal", &path, e))
    }

    /// The leftovers of `executor` and `runner`. Files that are not
    /// entries (a half-written temporary file, anything unreadable) are
    /// skipped.
    ///
    /// # Errors
    /// `Io` when the folder exists but cannot be listed.
    pub fn entries(&self, executor: &str, runner: &str) -> Result<Vec<Leftover>, ExecutorError> {
        let listing = match std::fs::read_dir(&self.dir) {
            Ok(listing) => listing,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(ExecutorError::io("reading the journal", &self.dir, e)),
        };
        let mut found: Vec<Leftover> = listing
            .filter_map(Result::ok)
            .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
            .filter_map(|e| std::fs::read(e.path()).ok())
            .filter_map(|bytes| serde_json::from_slice::<Leftover>(&bytes).ok())
            .filter(|l| l.executor == executor && l.runner == runner)
            .collect();
        found.sort_by(|a, b| (a.since, &a.id).cmp(&(b.since, &b.id)));
        Ok(found)
    }

    /// Stops every leftover of `executor`'s kind and `runner` again and
    /// forgets each one that is gone now; returns their ids. One that
    /// still cannot be stopped stays for the next sweep.
    ///
    /// # Errors
    /// `Io` when the journal cannot be read or an entry not removed; a
    /// failed stop is not an error (it is logged and kept).
    pub async fn sweep(
        &self,
        executor: &dyn Executor,
        runner: &str,
    ) -> Result<Vec<String>, ExecutorError> {
        let mut removed = Vec::new();
        for leftover in self.entries(executor.kind(), runner)? {
            match executor.stop(&RunHandle::in_container(&leftover.id)).await {
                Ok(()) => {
                    let path = self.file_of(&leftover.executor, &leftover.id);
                    match std::fs::remove_file(&path) {
                        Ok(()) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => return Err(ExecutorError::io("updating the journal", &path, e)),
                    }
                    tracing::info!(id = %leftover.id, since = leftover.since, "removed an environment a run had left");
                    removed.push(leftover.id);
                }
                Err(err) => {
                    tracing::warn!(id = %leftover.id, %err, "an environment a run left still cannot be removed");
                }
            }
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_kept_per_backend_and_runner_and_junk_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::new(dir.path().join("journal"));
        assert!(journal.entries("k8s", "did:plc:a").unwrap().is_empty());
        for (executor, runner, id) in [
            ("k8s", "did:plc:a", "job-1"),
            ("k8s", "did:plc:b", "job-2"),
            ("docker", "did:plc:a", "c0ffee"),
            ("k8s", "did:plc:a", "job-1"),
        ] {
            journal
                .record(&Leftover::new(executor, runner, id, "refused"))
                .unwrap();
        }
        std::fs::write(journal.dir().join("junk.json"), "{").unwrap();
        std::fs::write(journal.dir().join("x.json.tmp"), "{}").unwrap();
        let ids: Vec<String> = journal
            .entries("k8s", "did:plc:a")
            .unwrap()
            .into_iter()
            .map(|l| l.id)
            .collect();
        assert_eq!(ids, ["job-1"], "one file per environment");
    }
}
