//! The result JSON written at the end of every run.

use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use tokio::io::AsyncReadExt;

use crate::{ExecutorError, Failure};

mod environment;
mod media;

pub use environment::{EnvironmentFacts, StepIsolation};
pub use media::media_type;

/// The JSON Schema of [`RunResult`], as shipped in `executor-core/schema/`.
pub const RESULT_SCHEMA: &str = include_str!("../schema/run-result.schema.json");

/// How a whole run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Every step exited 0.
    Success,
    /// A step exited non-zero.
    Failed,
    /// A step or the run hit its timeout.
    Timeout,
    /// The run was cancelled (Ctrl-C, SIGTERM, or the embedding program).
    Cancelled,
    /// Infrastructure failed: the environment, the engine, a lost exit status.
    Error,
}

impl RunStatus {
    /// The documented `runner-cli` exit code for this status.
    ///
    /// ```
    /// use executor_core::RunStatus;
    /// assert_eq!(RunStatus::Timeout.exit_code(), 124);
    /// ```
    pub fn exit_code(self) -> i32 {
        match self {
            RunStatus::Success => 0,
            RunStatus::Failed => 1,
            RunStatus::Error => 3,
            RunStatus::Timeout => 124,
            RunStatus::Cancelled => 130,
        }
    }

    /// Lower-case name as in the JSON.
    ///
    /// ```
    /// assert_eq!(executor_core::RunStatus::Timeout.as_str(), "timeout");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Success => "success",
            RunStatus::Failed => "failed",
            RunStatus::Timeout => "timeout",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Error => "error",
        }
    }
}

/// How one step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StepStatus {
    /// Exited 0.
    Success,
    /// Exited non-zero.
    Failed,
    /// Killed by the step or run timeout.
    Timeout,
    /// Killed by cancellation.
    Cancelled,
    /// Not run because an earlier step did not succeed.
    Skipped,
    /// Infrastructure failed while it ran.
    Error,
}

impl StepStatus {
    /// Lower-case name as in the JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            StepStatus::Success => "success",
            StepStatus::Failed => "failed",
            StepStatus::Timeout => "timeout",
            StepStatus::Cancelled => "cancelled",
            StepStatus::Skipped => "skipped",
            StepStatus::Error => "error",
        }
    }
}

/// One step's record in the result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepResult {
    /// The step's name.
    pub name: String,
    /// How it ended.
    pub status: StepStatus,
    /// The shell's exit code; `null` when it has none (skipped, killed, error).
    pub exit_code: Option<i32>,
    /// Why it ended that way, when there is more to say.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When it started; `null` for a skipped step.
    #[serde(with = "time::serde::rfc3339::option")]
    pub started_at: Option<OffsetDateTime>,
    /// When it ended; `null` for a skipped step.
    #[serde(with = "time::serde::rfc3339::option")]
    pub finished_at: Option<OffsetDateTime>,
    /// Milliseconds it took; 0 for a skipped step.
    pub duration_ms: u64,
    /// Why it did not succeed; `null` for a successful or skipped step.
    #[serde(default)]
    pub failure: Option<crate::Failure>,
    /// Bytes of its output dropped past the log's limit; absent when
    /// none were (the log holds all of it).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub output_dropped_bytes: u64,
    /// What it cost (CPU time, peak memory), as its backend measured it;
    /// absent when it did not run or was not measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<crate::usage::StepUsage>,
    /// What a step with an id wrote to `$STEP_OUTPUT`, secrets masked;
    /// absent when it wrote nothing (or has no id).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub outputs: std::collections::BTreeMap<String, String>,
}

/// For `skip_serializing_if`: a count that says nothing when 0.
pub(crate) fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl StepResult {
    /// A step that never ran.
    pub fn skipped(name: impl Into<String>) -> Self {
        StepResult {
            name: name.into(),
            status: StepStatus::Skipped,
            exit_code: None,
            error: None,
            started_at: None,
            finished_at: None,
            duration_ms: 0,
            failure: None,
            output_dropped_bytes: 0,
            usage: None,
            outputs: std::collections::BTreeMap::new(),
        }
    }
}

impl StepResult {
    fn texts(&mut self) -> impl Iterator<Item = &mut String> {
        std::iter::once(&mut self.name)
            .chain(self.error.as_mut())
            .chain(self.failure.iter_mut().flat_map(Failure::texts))
            .chain(self.outputs.values_mut())
    }
}

impl Attempt {
    pub(crate) fn texts(&mut self) -> impl Iterator<Item = &mut String> {
        self.failure
            .iter_mut()
            .flat_map(Failure::texts)
            .chain(self.steps.iter_mut().flat_map(StepResult::texts))
    }
}

impl Failure {
    pub(crate) fn texts(&mut self) -> impl Iterator<Item = &mut String> {
        std::iter::once(&mut self.message).chain(self.step.as_mut())
    }
}

/// One file that came back in the outputs folder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutputFile {
    /// Path relative to the outputs folder, `/`-separated.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// Lower-case hex SHA-256 of the contents.
    pub sha256: String,
    /// Media type, sniffed from the contents (images) or the extension.
    pub media_type: String,
}

/// The result of a run, written as JSON with camelCase field names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunResult {
    /// The run's name.
    pub name: String,
    /// The runner's DID.
    pub runner: String,
    /// The backend, e.g. `shell`, `docker`, `k8s`.
    pub executor: String,
    /// How the run ended.
    pub status: RunStatus,
    /// What went wrong, when something did.
    pub error: Option<String>,
    /// What kind of failure ended the run, whether a retry could fix it,
    /// and in which step; `null` for a successful run.
    #[serde(default)]
    pub failure: Option<crate::Failure>,
    /// When the run started.
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: OffsetDateTime,
    /// When the run ended.
    #[serde(with = "time::serde::rfc3339")]
    pub finished_at: OffsetDateTime,
    /// Every step in order, including skipped ones.
    pub steps: Vec<StepResult>,
    /// Every file in the outputs folder, sorted by path.
    pub outputs: Vec<OutputFile>,
    /// Entries of the outputs folder that were not brought back (a fifo, a
    /// device, a link out of the folder), each with the reason; every
    /// other output still came back.
    #[serde(default)]
    pub refused: Vec<crate::tar::RefusedEntry>,
    /// Every cache of the run, in the order given.
    #[serde(default)]
    pub caches: Vec<crate::CacheResult>,
    /// Time spent outside the steps.
    #[serde(default)]
    pub phases: Phases,
    /// Every attempt in order, the last one described by the fields above
    /// (`status`, `error`, `failure`, `steps`, `phases`); more than one
    /// only when a retryable failure was retried
    /// ([`RetryPolicy`](crate::RetryPolicy)).
    #[serde(default)]
    pub attempts: Vec<Attempt>,
}

/// One attempt of a run: its own steps, failure and timings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Attempt {
    /// 1 for the first attempt.
    pub number: u32,
    /// How the attempt ended.
    pub status: RunStatus,
    /// Why it did not succeed; `null` when it did.
    pub failure: Option<crate::Failure>,
    /// When it started.
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: OffsetDateTime,
    /// When it ended.
    #[serde(with = "time::serde::rfc3339")]
    pub finished_at: OffsetDateTime,
    /// Its steps, as in the result's `steps`.
    pub steps: Vec<StepResult>,
    /// Its time outside the steps.
    pub phases: Phases,
    /// What held in its environment, where the backend says
    /// ([`Executor::environment`](crate::Executor::environment)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<EnvironmentFacts>,
}

/// Milliseconds a run spent outside its steps, so a slow run says where
/// its time went: the environment and checkout, the outputs, the teardown.
///
/// ```
/// let phases = executor_core::Phases::default();
/// assert_eq!(serde_json::to_value(&phases).unwrap()["startMs"], 0);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Phases {
    /// `start`: creating the environment, streaming the checkout and steps in.
    pub start_ms: u64,
    /// `outputs`: streaming `/outputs` back to the host folder.
    pub outputs_ms: u64,
    /// `stop`: tearing the environment down.
    pub stop_ms: u64,
}

impl RunResult {
    /// Masks every secret value in every text of the result: names,
    /// errors, notes, paths. The driver does it before returning a result.
    ///
    /// ```
    /// use executor_core::mask::{Masker, Secret};
    /// # let mut result: executor_core::RunResult = serde_json::from_str(r#"{"name":"r","runner":"did:plc:r","executor":"shell","status":"error","error":"login failed for hunter22","startedAt":"2026-01-01T00:00:00Z","finishedAt":"2026-01-01T00:00:00Z","steps":[],"outputs":[],"caches":[]}"#).unwrap();
    /// result.mask(&Masker::new([&Secret::new("hunter22")]));
    /// assert_eq!(result.error.as_deref(), Some("login failed for [MASKED]"));
    /// ```
    pub fn mask(&mut self, masker: &crate::mask::Masker) {
        if masker.is_empty() {
            return;
        }
        self.edit_texts(|text| masker.mask_string(text));
    }

    /// Calls `edit` on every text of the result a person reads: names,
    /// errors, failure messages, notes, paths, in every attempt. How
    /// [`RunResult::mask`] reaches them all, and how a front end words
    /// the result its own way.
    ///
    /// ```
    /// # let mut result: executor_core::RunResult = serde_json::from_str(r#"{"name":"r","runner":"did:plc:r","executor":"shell","status":"error","error":"RunSpec::checkout /x: missing","startedAt":"2026-01-01T00:00:00Z","finishedAt":"2026-01-01T00:00:00Z","steps":[],"outputs":[]}"#).unwrap();
    /// result.edit_texts(|t| *t = t.replace("RunSpec::checkout", "--workdir"));
    /// assert_eq!(result.error.as_deref(), Some("--workdir /x: missing"));
    /// ```
    pub fn edit_texts(&mut self, mut edit: impl FnMut(&mut String)) {
        let texts = [&mut self.name, &mut self.runner, &mut self.executor]
            .into_iter()
            .chain(self.error.as_mut())
            .chain(self.failure.iter_mut().flat_map(Failure::texts))
            .chain(self.steps.iter_mut().flat_map(StepResult::texts))
            .chain(self.attempts.iter_mut().flat_map(Attempt::texts))
            .chain(self.outputs.iter_mut().map(|o| &mut o.path))
            .chain(
                self.refused
                    .iter_mut()
                    .flat_map(|r| [&mut r.path, &mut r.reason]),
            )
            .chain(
                self.caches
                    .iter_mut()
                    .flat_map(|c| [&mut c.key, &mut c.path].into_iter().chain(c.note.as_mut())),
            );
        for text in texts {
            edit(text);
        }
    }

    /// The `runner-cli` exit code of this result: the failure kind's
    /// ([`FailureKind::exit_code`](crate::FailureKind::exit_code)), else the
    /// status's.
    ///
    /// ```
    /// # let result: executor_core::RunResult = serde_json::from_str(r#"{"name":"r","runner":"did:plc:r","executor":"shell","status":"error","error":"bad","failure":{"kind":"input","message":"bad","retryable":false,"step":null},"startedAt":"2026-01-01T00:00:00Z","finishedAt":"2026-01-01T00:00:00Z","steps":[],"outputs":[]}"#).unwrap();
    /// assert_eq!(result.exit_code(), 2);
    /// ```
    pub fn exit_code(&self) -> i32 {
        match &self.failure {
            Some(failure) => failure.kind.exit_code(),
            None => self.status.exit_code(),
        }
    }

    /// The result as pretty JSON.
    pub fn to_json(&self) -> String {
        // Serialising these plain types cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Writes the result to `path`. A regular file (or a path not there
    /// yet) is written through a temporary file beside it and a rename, so
    /// a reader never sees half a result; anything else (a device, a FIFO,
    /// a socket, `/dev/stdout`) is written into and left as it was, with
    /// nothing made beside it ([`Destination`](crate::destination::Destination)).
    /// The folder must exist.
    ///
    /// ```
    /// # let result: executor_core::RunResult = serde_json::from_str(r#"{"name":"r","runner":"did:plc:r","executor":"shell","status":"success","startedAt":"2026-01-01T00:00:00Z","finishedAt":"2026-01-01T00:00:00Z","steps":[],"outputs":[]}"#).unwrap();
    /// let dir = tempfile::tempdir().unwrap();
    /// result.write_to(&dir.path().join("result.json")).unwrap();
    /// assert!(result.write_to(&dir.path().join("missing/result.json")).is_err());
    /// ```
    ///
    /// # Errors
    /// `Io` naming the file when it cannot be written, replaced or opened.
    pub fn write_to(&self, path: &Path) -> Result<(), ExecutorError> {
        let json = self.to_json() + "\n";
        crate::destination::Destination::of(path)
            .and_then(|dest| dest.replace_with(json.as_bytes()))
            .map_err(|e| ExecutorError::io("writing the result", path, e))
    }
}

/// Lists every regular file under `dir` with its size, SHA-256 and media
/// type, reading each file as a stream. Symlinks are not followed.
///
/// # Errors
/// `Io` naming the file or folder that could not be listed or read.
pub async fn manifest(dir: &Path) -> Result<Vec<OutputFile>, ExecutorError> {
    let mut files = Vec::new();
    if !dir.is_dir() {
        return Ok(files);
    }
    for entry in walkdir::WalkDir::new(dir)
        .follow_links(false)
        .sort_by_file_name()
    {
        let entry = entry.map_err(|e| {
            let path = e.path().unwrap_or(dir).to_path_buf();
            ExecutorError::io("listing outputs", path, e.into())
        })?;
        if !entry.file_type().is_file() {
            continue;
        }
        let rel = entry
            .path()
            .strip_prefix(dir)
            .unwrap_or(entry.path())
            .components()
            .map(|c| c.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/");
        let (size, sha256, head) = digest(entry.path()).await?;
        files.push(OutputFile {
            media_type: media_type(&rel, &head).to_string(),
            path: rel,
            size,
            sha256,
        });
    }
    Ok(files)
}

async fn digest(path: &Path) -> Result<(u64, String, Vec<u8>), ExecutorError> {
    let io = |e| ExecutorError::io("reading an output", path, e);
    let mut file = tokio::fs::File::open(path).await.map_err(io)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut head = Vec::new();
    let mut size = 0u64;
    loop {
        let n = file.read(&mut buf).await.map_err(io)?;
        if n == 0 {
            break;
        }
        if head.len() < 512 {
            head.extend_from_slice(&buf[..n.min(512 - head.len())]);
        }
        hasher.update(&buf[..n]);
        size += n as u64;
    }
    Ok((size, hex::encode(hasher.finalize()), head))
}

#[cfg(test)]
mod tests;
