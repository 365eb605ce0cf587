//! What every case needs: fresh folders, a watchable log, a schema check.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use executor_core::{run, RunLog, RunResult, RunSpec, RESULT_SCHEMA};
use tokio_util::sync::CancellationToken;

use crate::Backend;

/// How long any case may wait for something it expects to happen.
pub const PATIENCE: Duration = Duration::from_secs(120);

/// At most this much log text is kept for assertions; the rest is only counted.
const KEEP_LOG_BYTES: usize = 1 << 20;
/// How often, in log bytes, the log samples this process's memory.
const RSS_SAMPLE_EVERY: u64 = 16 << 20;

/// A fresh checkout, outputs folder and runner id for one case.
pub struct Fixture {
    dir: tempfile::TempDir,
    /// A runner DID unique to this case, so leftovers are attributable.
    pub runner: String,
}

impl Fixture {
    /// Creates empty `checkout/`, `steps/` and `outputs/` folders.
    pub fn new(case: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix(&format!("conformance-{case}-"))
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temp folder: {e}"));
        for sub in ["checkout", "steps", "outputs"] {
            std::fs::create_dir(dir.path().join(sub)).unwrap_or_else(|e| panic!("{sub}: {e}"));
        }
        let tag = dir
            .path()
            .file_name()
            .map(|n| {
                n.to_string_lossy()
                    .rsplit('-')
                    .next()
                    .unwrap_or("x")
                    .to_lowercase()
            })
            .unwrap_or_default();
        Fixture {
            runner: format!("did:plc:conformance-{case}-{tag}").replace('_', "-"),
            dir,
        }
    }

    /// The checkout folder.
    pub fn checkout(&self) -> PathBuf {
        self.dir.path().join("checkout")
    }
    /// The shared steps folder.
    pub fn steps(&self) -> PathBuf {
        self.dir.path().join("steps")
    }
    /// The host outputs folder.
    pub fn outputs(&self) -> PathBuf {
        self.dir.path().join("outputs")
    }

    /// A spec with this fixture's folders and the backend's image.
    pub fn spec(&self, backend: &dyn Backend, name: &str) -> RunSpec {
        let mut spec = RunSpec::new(name, &self.runner, self.checkout(), self.outputs())
            .steps_dir(self.steps())
            .timeouts(PATIENCE, PATIENCE);
        spec.image = backend.image();
        backend.adjust(&mut spec);
        spec
    }
}

/// A log that keeps the first megabyte, counts everything, and can be waited on.
#[derive(Clone, Default)]
pub struct WatchedLog {
    inner: Arc<Mutex<LogState>>,
    changed: Arc<tokio::sync::Notify>,
}

#[derive(Default)]
struct LogState {
    text: Vec<u8>,
    /// The first megabyte of the run's events, as JSON lines.
    events: Vec<u8>,
    total: u64,
    writes: u64,
    largest_write: usize,
    since_sample: u64,
    max_rss: u64,
    /// The run log's limit of step output, when not the default.
    output_limit: Option<Option<u64>>,
}

impl WatchedLog {
    /// A run log writing here, its events as JSON lines too (see
    /// [`WatchedLog::events`]).
    pub fn run_log(&self) -> RunLog {
        let log = RunLog::inline(self.clone());
        if let Some(limit) = self.state().output_limit {
            log.limit_output(limit);
        }
        let events = EventsKept(self.inner.clone());
        log.add_sink(Arc::new(executor_core::events::JsonLines::new(events)));
        log
    }
    /// A log whose run log holds at most `limit` bytes of step output
    /// (`None`: all of it).
    pub fn with_output_limit(limit: Option<u64>) -> Self {
        let log = WatchedLog::default();
        log.state().output_limit = Some(limit);
        log
    }
    /// The first megabyte of the run's events, as `--events` writes them.
    pub fn events(&self) -> String {
        String::from_utf8_lossy(&self.state().events).into_owned()
    }
    /// The kept text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.state().text).into_owned()
    }
    /// Bytes written in all.
    pub fn total(&self) -> u64 {
        self.state().total
    }
    /// The largest single write, to show output arrives in pieces.
    pub fn largest_write(&self) -> usize {
        self.state().largest_write
    }
    /// The largest resident memory seen, sampled every 16 MiB of log.
    pub fn max_rss(&self) -> u64 {
        self.state().max_rss
    }
    /// Number of writes.
    pub fn writes(&self) -> u64 {
        self.state().writes
    }
    fn state(&self) -> std::sync::MutexGuard<'_, LogState> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until the kept text contains `needle`, failing the case after [`PATIENCE`].
    pub async fn wait_for(&self, needle: &str) {
        if tokio::time::timeout(PATIENCE, self.appeared(needle))
            .await
            .is_err()
        {
            panic!("{needle:?} never appeared in the log:\n{}", self.text());
        }
    }

    /// Resolves when the kept text contains `needle`, however long that
    /// takes: for racing a run against a line that must not appear.
    pub async fn appeared(&self, needle: &str) {
        loop {
            let notified = self.changed.notified();
            if self.text().contains(needle) {
                return;
            }
            notified.await;
        }
    }
}

impl Write for WatchedLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        {
            let mut s = self.state();
            let room = KEEP_LOG_BYTES.saturating_sub(s.text.len());
            s.text.extend_from_slice(&buf[..buf.len().min(room)]);
            s.total += buf.len() as u64;
            s.writes += 1;
            s.largest_write = s.largest_write.max(buf.len());
            s.since_sample += buf.len() as u64;
            if s.since_sample >= RSS_SAMPLE_EVERY {
                s.since_sample = 0;
                s.max_rss = s.max_rss.max(rss().unwrap_or(0));
            }
        }
        self.changed.notify_waiters();
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Where a [`WatchedLog`]'s events go.
struct EventsKept(Arc<Mutex<LogState>>);

impl Write for EventsKept {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let room = KEEP_LOG_BYTES.saturating_sub(s.events.len());
        s.events.extend_from_slice(&buf[..buf.len().min(room)]);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Runs `spec` to the end with a fresh log, checks the result against the
/// schema, and returns both.
pub async fn run_to_end(backend: &dyn Backend, spec: &RunSpec) -> (RunResult, WatchedLog) {
    run_cancellable(backend, spec, CancellationToken::new()).await
}

/// As [`run_to_end`], with a cancellation token the case controls.
pub async fn run_cancellable(
    backend: &dyn Backend,
    spec: &RunSpec,
    cancel: CancellationToken,
) -> (RunResult, WatchedLog) {
    let log = WatchedLog::default();
    let result = run_watched(backend, spec, &log, cancel).await;
    (result, log)
}

/// Runs `spec` writing to `log`, which the case can watch meanwhile.
pub async fn run_watched(
    backend: &dyn Backend,
    spec: &RunSpec,
    log: &WatchedLog,
    cancel: CancellationToken,
) -> RunResult {
    run_on(backend.executor(), spec, log, cancel).await
}

/// As [`run_watched`], on any executor: a [`crate::hooked::Hooked`] one.
pub async fn run_on(
    executor: &dyn executor_core::Executor,
    spec: &RunSpec,
    log: &WatchedLog,
    cancel: CancellationToken,
) -> RunResult {
    let result = bounded(run(executor, spec, &log.run_log(), cancel)).await;
    assert_valid_result(&result);
    result
}

/// A probe script for [`crate::hooked::Hooked::probing_before_stop`]:
/// prints `marker-processes=N`, the number of live processes whose command
/// line starts with `command`, waiting up to 5 s for it to reach 0 (a
/// killed process takes a moment to go). Zombies have no command line and
/// do not count.
pub fn count_processes_script(command: &str) -> String {
    format!(
        "n=0; for try in $(seq 1 100); do n=0; \
         for f in /proc/[0-9]*/cmdline; do \
         case \"$(tr '\\000' ' ' 2>/dev/null < \"$f\")\" in '{command}'*) n=$((n+1));; esac; done; \
         [ \"$n\" = 0 ] && break; sleep 0.05; done; echo \"marker-processes=$n\""
    )
}

/// Runs `spec` with `store` as the host's cache folder.
pub async fn run_with_caches(
    backend: &dyn Backend,
    spec: &RunSpec,
    store: &executor_core::CacheStore,
) -> (RunResult, WatchedLog) {
    let log = WatchedLog::default();
    let options = executor_core::DriverOptions {
        caches: Some(store.clone()),
        ..executor_core::DriverOptions::default()
    };
    let result = bounded(executor_core::run_with(
        backend.executor(),
        spec,
        &log.run_log(),
        CancellationToken::new(),
        &options,
    ))
    .await;
    assert_valid_result(&result);
    (result, log)
}

/// Awaits `fut`, failing the case if it takes longer than [`PATIENCE`] plus
/// the driver's grace: a guard against hangs, not a timing assertion.
pub async fn bounded<T>(fut: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(PATIENCE * 3, fut).await {
        Ok(v) => v,
        Err(_) => panic!("the run did not finish within {:?}", PATIENCE * 3),
    }
}

/// Checks a result against the shipped JSON Schema, with formats.
pub fn assert_valid_result(result: &RunResult) {
    let schema: serde_json::Value =
        serde_json::from_str(RESULT_SCHEMA).unwrap_or_else(|e| panic!("schema is not JSON: {e}"));
    let validator = jsonschema::draft202012::options()
        .should_validate_formats(true)
        .build(&schema)
        .unwrap_or_else(|e| panic!("schema does not compile: {e}"));
    let value = serde_json::to_value(result).unwrap_or_else(|e| panic!("{e}"));
    let errors: Vec<String> = validator
        .iter_errors(&value)
        .map(|e| e.to_string())
        .collect();
    assert!(
        errors.is_empty(),
        "result breaks the schema: {errors:?}\n{}",
        result.to_json()
    );
}

/// Fails the case if the backend's probe finds anything of `runner` left.
pub async fn assert_nothing_left(backend: &dyn Backend, runner: &str) {
    let left = backend.leftovers(runner).await;
    assert!(left.is_empty(), "left behind for {runner}: {left:?}");
}

/// Writes `contents` to `root/rel`, creating folders.
pub fn write(root: &Path, rel: &str, contents: impl AsRef<[u8]>) {
    let path = root.join(rel);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap_or_else(|e| panic!("{}: {e}", parent.display()));
    }
    std::fs::write(&path, contents).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// Resident memory of this process now, in bytes (Linux `VmRSS`).
pub fn rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// A writer whose bytes can be read back, for dry-run plans in tests.
#[derive(Clone, Default)]
pub struct SharedBuf(Arc<Mutex<Vec<u8>>>);

impl SharedBuf {
    /// Everything written so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    }
}

impl Write for SharedBuf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
