//! What a run asks of its caches, and what each restore and save did.

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
