//! The step protocol's scripts, run by the host's `sh` and by busybox's,
//! through an exec that can cut its stream after a number of bytes and
//! kill its own process, as Docker does when its client goes away.

use super::*;
use executor_core::script::Script;
use std::collections::VecDeque;
use std::path::Path;
use std::sync::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod agent;
mod channel;
mod cuts;
mod ends;
mod held;
mod resume;
mod status;
mod tee;

/// Runs argv on the host with `shell` in place of `sh`. Each exec takes
/// the next cut from `cuts`: after that many bytes of stdout its process
/// is killed (only it, as an engine kills an exec's process) and its
/// stream ends without a status. With `held`, every exec after the
/// first waits until that file exists: a reconnect that comes late.
struct HostExec {
    shell: Vec<String>,
    cuts: Mutex<VecDeque<Option<u64>>>,
    execs: Mutex<Vec<Vec<String>>>,
    held: Option<std::path::PathBuf>,
    /// What goes wrong in each exec after the first, in turn.
    faults: Mutex<VecDeque<Fault>>,
    /// Every exec after the first fails as [`Fault::Refused`] until a
    /// kill has run: an environment a step's processes fill.
    full_until_killed: bool,
    killed: std::sync::atomic::AtomicBool,
}

/// A fault in one exec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    None,
    /// The engine could not start the exec: it says so in the exec's
    /// stdout and stderr, as Docker does, and the exec ends with 126.
    Refused,
    /// The exec's shell fails a command of its own first (as one that
    /// cannot fork does) and goes on.
    ShellError,
}

/// What Docker writes into an exec's stream when it cannot start it.
const REFUSED: &str =
    "OCI runtime exec failed: exec failed: unable to start container process: read init-p: connection reset by peer: unknown\r\n";

impl HostExec {
    fn new(shell: &[&str], cuts: &[Option<u64>]) -> Self {
        HostExec {
            shell: shell.iter().map(|s| s.to_string()).collect(),
            cuts: Mutex::new(cuts.iter().copied().collect()),
            execs: Mutex::new(Vec::new()),
            held: None,
            faults: Mutex::new(VecDeque::new()),
            full_until_killed: false,
            killed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn with_faults(mut self, faults: &[Fault]) -> Self {
        self.faults = Mutex::new(faults.iter().copied().collect());
        self
    }

    /// The fault of the exec after `later` (whether it is not the first).
    fn fault(&self, later: bool) -> Fault {
        if !later {
            return Fault::None;
        }
        if self.full_until_killed && !self.killed.load(std::sync::atomic::Ordering::SeqCst) {
            return Fault::Refused;
        }
        self.faults
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front()
            .unwrap_or(Fault::None)
    }

    fn command(&self, argv: &[String]) -> tokio::process::Command {
        let mut argv = argv.to_vec();
        if argv[0] == "sh" {
            argv.splice(0..1, self.shell.iter().cloned());
        }
        let mut cmd = tokio::process::Command::new(&argv[0]);
        cmd.args(&argv[1..]);
        // The host's tools for the scripts (busybox's applets under its sh).
        cmd.stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(false);
        cmd
    }
}

#[async_trait]
impl StepExec for HostExec {
    async fn exec(
        &self,
        argv: &[String],
        stdout: &mut (dyn AsyncWrite + Send + Unpin),
        stderr: &mut (dyn AsyncWrite + Send + Unpin),
        interrupt: &CancellationToken,
    ) -> Result<ExecEnd, ExecutorError> {
        let later = {
            let mut execs = self.execs.lock().unwrap_or_else(|p| p.into_inner());
            execs.push(argv.to_vec());
            execs.len() > 1
        };
        if let (true, Some(held)) = (later, &self.held) {
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            while !held.exists() {
                assert!(
                    std::time::Instant::now() < deadline,
                    "{} never came",
                    held.display()
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        let cut = self
            .cuts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front()
            .flatten();
        let mut argv = argv.to_vec();
        match self.fault(later) {
            Fault::None => {}
            Fault::Refused => {
                stdout
                    .write_all(REFUSED.as_bytes())
                    .await
                    .map_err(|e| ExecutorError::backend("refusing", e.to_string()))?;
                stderr
                    .write_all(REFUSED.as_bytes())
                    .await
                    .map_err(|e| ExecutorError::backend("refusing", e.to_string()))?;
                return Ok(ExecEnd::Cut("the engine reported exit 126".into()));
            }
            Fault::ShellError => {
                let script = &mut argv[2];
                assert!(script.contains("C=8388608\n"), "not a follow: {script}");
                *script = script.replacen("C=8388608\n", "C=8388608\nknotless_no_such_tool\n", 1);
            }
        }
        let mut child = self
            .command(&argv)
            .spawn()
            .map_err(|e| ExecutorError::backend("spawning", e.to_string()))?;
        let mut out = child
            .stdout
            .take()
            .ok_or_else(|| ExecutorError::backend("stdout", "none"))?;
        let mut err = child
            .stderr
            .take()
            .ok_or_else(|| ExecutorError::backend("stderr", "none"))?;
        let mut sent = 0u64;
        let pump = async {
            let mut ob = vec![0u8; 512];
            let mut eb = vec![0u8; 512];
            let (mut out_done, mut err_done) = (false, false);
            while !(out_done && err_done) {
                tokio::select! {
                    n = out.read(&mut ob), if !out_done => {
                        let n = n.unwrap_or(0);
                        if n == 0 { out_done = true; continue; }
                        let take = match cut { Some(c) => n.min((c - sent) as usize), None => n };
                        stdout.write_all(&ob[..take]).await.map_err(|e| e.to_string())?;
                        sent += take as u64;
                        if cut == Some(sent) { return Err("cut".to_string()); }
                    }
                    n = err.read(&mut eb), if !err_done => {
                        let n = n.unwrap_or(0);
                        if n == 0 { err_done = true; continue; }
                        stderr.write_all(&eb[..n]).await.map_err(|e| e.to_string())?;
                    }
                }
            }
            Ok(())
        };
        let pumped = tokio::select! {
            r = pump => r,
            _ = interrupt.cancelled() => {
                let _ = child.start_kill();
                return Ok(ExecEnd::Interrupted);
            }
        };
        match pumped {
            Ok(()) => {
                let status = child
                    .wait()
                    .await
                    .map_err(|e| ExecutorError::backend("waiting", e.to_string()))?;
                Ok(match status.code() {
                    Some(code) => ExecEnd::Exited(code),
                    None => ExecEnd::Cut("killed".into()),
                })
            }
            Err(why) => {
                // The client went away: the engine kills the exec's own
                // process, and nothing reads its pipes any more.
                let _ = child.start_kill();
                drop((out, err));
                let _ = child.wait().await;
                Ok(ExecEnd::Cut(why))
            }
        }
    }

    async fn kill(&self, script: &str) -> Result<(), ExecutorError> {
        self.killed.store(true, std::sync::atomic::Ordering::SeqCst);
        let status = self
            .command(&["sh".into(), "-c".into(), script.into()])
            .status()
            .await
            .map_err(|e| ExecutorError::backend("killing", e.to_string()))?;
        if status.success() {
            Ok(())
        } else {
            Err(ExecutorError::backend("killing", format!("{status}")))
        }
    }
}

/// The shells the scripts must work under: the host's `sh` and busybox's,
/// when there is one.
fn shells() -> Vec<Vec<&'static str>> {
    let mut shells = vec![vec!["sh"]];
    if Path::new("/usr/bin/busybox").exists() || Path::new("/bin/busybox").exists() {
        shells.push(vec!["busybox", "sh"]);
    }
    shells
}

const FOLLOW_NOW: Follow = Follow {
    reconnect: Duration::from_secs(5),
    from: None,
    signed: None,
};

/// A fresh state folder and the files of step `t` in it.
fn state() -> (tempfile::TempDir, StepFiles) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let files = StepFiles::new(&dir.path().display().to_string(), "t");
    (dir, files)
}

/// Runs the step `start` starts through `exec` to its end.
async fn to_end(exec: &HostExec, files: &StepFiles, start: &[String]) -> StepEnd {
    let (log, _) = RunLog::memory();
    run_step(
        exec,
        files,
        start,
        &log,
        &CancellationToken::new(),
        FOLLOW_NOW,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

/// A cut after `n` bytes of a step's stdout: after the begin mark and `n`.
fn begun(n: u64) -> u64 {
    BEGIN_MARK.len() as u64 + n
}

/// A step that writes 3000 numbered lines to stdout, one to stderr, and
/// exits 7.
const NUMBERED: &str =
    "i=0; while [ $i -lt 3000 ]; do echo \"line $i\"; i=$((i+1)); done; echo done >&2; exit 7";

fn numbered_lines() -> String {
    (0..3000).map(|i| format!("line {i}\n")).collect()
}

/// What a run log's output events carried, stdout and stderr apart: the
/// bytes exactly, without the log's own lines between them.
#[derive(Default)]
struct Outputs(Mutex<(Vec<u8>, Vec<u8>)>);

impl Outputs {
    fn attach(log: &RunLog) -> std::sync::Arc<Outputs> {
        let outputs = std::sync::Arc::new(Outputs::default());
        let sink = outputs.clone();
        log.add_sink(std::sync::Arc::new(
            move |event: &executor_core::events::Event| {
                if let executor_core::events::Event::Output { stream, bytes, .. } = event {
                    let mut both = sink.0.lock().unwrap_or_else(|p| p.into_inner());
                    match stream {
                        OutputStream::Stdout => both.0.extend_from_slice(bytes),
                        OutputStream::Stderr => both.1.extend_from_slice(bytes),
                    }
                }
            },
        ));
        outputs
    }

    fn get(&self) -> (String, String) {
        let both = self.0.lock().unwrap_or_else(|p| p.into_inner());
        (
            String::from_utf8_lossy(&both.0).into_owned(),
            String::from_utf8_lossy(&both.1).into_owned(),
        )
    }
}

/// Runs `script` as a step through an exec cut at `cuts`: how it ended,
/// the log's text, how many execs it took, and its stdout and stderr as
/// the log's events carried them.
async fn run_script(
    shell: &[&str],
    cuts: &[Option<u64>],
    script: &str,
) -> (StepEnd, String, usize, (String, String)) {
    run_script_held(shell, cuts, script, false).await
}

/// As [`run_script`]; with `late`, the runner reconnects only once the
/// step has ended.
async fn run_script_held(
    shell: &[&str],
    cuts: &[Option<u64>],
    script: &str,
    late: bool,
) -> (StepEnd, String, usize, (String, String)) {
    let (dir, files) = state();
    let mut exec = HostExec::new(shell, cuts);
    if late {
        exec.held = Some(dir.path().join("stepio-t.status"));
    }
    let start = files.start_argv("", Script::Inline(script));
    let (end, text, outputs) = logged(&exec, &files, &start).await;
    let execs = exec.execs.lock().unwrap_or_else(|p| p.into_inner()).len();
    (end, text, execs, outputs)
}

/// Runs the step `start` starts through `exec` to its end: how it ended,
/// the log's text, and its stdout and stderr as the log's events carried
/// them.
async fn logged(
    exec: &HostExec,
    files: &StepFiles,
    start: &[String],
) -> (StepEnd, String, (String, String)) {
    let (log, text) = RunLog::memory();
    // These steps print more than a log holds by default.
    log.limit_output(None);
    let outputs = Outputs::attach(&log);
    let end = run_step(
        exec,
        files,
        start,
        &log,
        &CancellationToken::new(),
        FOLLOW_NOW,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    log.flush(Duration::from_secs(30)).await;
    (end, text.text(), outputs.get())
}

/// The runner's lines of a log, without the step's output (which may be
/// 64 MiB), to show when an assertion fails.
fn runner_lines(text: &str) -> String {
    text.lines()
        .filter(|l| l.starts_with("==> "))
        .collect::<Vec<_>>()
        .join("\n")
}
