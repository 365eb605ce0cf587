//! The step protocol's scripts, run by the host's `sh` and by busybox's,
//! through an exec that can cut its stream after a number of bytes and
//! kill its own process, as Docker does when its client goes away.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Mutex;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use executor_core::script::Script;

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

async fn run_numbered(
    shell: &[&str],
    cuts: &[Option<u64>],
) -> (StepEnd, String, usize, (String, String)) {
    run_script(shell, cuts, NUMBERED).await
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

/// The bytes a log says were no longer kept, over all its gaps.
fn lost_bytes(text: &str) -> u64 {
    text.lines()
        .filter(|l| l.contains("were no longer kept"))
        .map(|said| {
            said.trim_start_matches("==> ")
                .split(' ')
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("{said}"))
        })
        .sum()
}

#[tokio::test]
async fn an_unbroken_step_is_one_exec_with_the_steps_own_code() {
    for shell in shells() {
        let (end, text, execs, (out, err)) = run_numbered(&shell, &[]).await;
        assert_eq!(end, StepEnd::Exited(7), "{shell:?}");
        assert_eq!(execs, 1, "{shell:?}");
        assert_eq!(out, numbered_lines(), "{shell:?}: {text}");
        assert_eq!(err, "done\n", "{shell:?}");
    }
}

#[tokio::test]
async fn a_step_cut_twice_ends_with_its_code_and_every_line_once() {
    for shell in shells() {
        // Cut mid-line in the first exec, and again in the follow.
        let (end, text, execs, (out, err)) =
            run_numbered(&shell, &[Some(begun(1001)), Some(begun(7000))]).await;
        assert_eq!(end, StepEnd::Exited(7), "{shell:?}: {text}");
        assert_eq!(out, numbered_lines(), "{shell:?}: {text}");
        assert_eq!(err, "done\n", "{shell:?}");
        assert!(
            text.contains("from byte 1001 of stdout"),
            "{shell:?}: {text}"
        );
        assert!(
            text.contains("from byte 8001 of stdout"),
            "{shell:?}: {text}"
        );
        // start, follow, follow, status
        assert_eq!(execs, 4, "{shell:?}");
    }
}

#[tokio::test]
async fn a_second_start_of_a_step_follows_the_first_instead_of_running_it_again() {
    for shell in shells() {
        let (dir, files) = state();
        let count = dir.path().join("runs");
        let script = format!("echo ran >> {}; echo hello; exit 3", count.display());
        let start = files.start_argv("", Script::Inline(&script));
        let first = HostExec::new(&shell, &[]);
        let (log, _) = RunLog::memory();
        let cancel = CancellationToken::new();
        let one = run_step(&first, &files, &start, &log, &cancel, FOLLOW_NOW).await;
        let (log2, text2) = RunLog::memory();
        let two = run_step(&first, &files, &start, &log2, &cancel, FOLLOW_NOW).await;
        log2.flush(Duration::from_secs(10)).await;
        assert_eq!(one.ok(), Some(StepEnd::Exited(3)), "{shell:?}");
        assert_eq!(two.ok(), Some(StepEnd::Exited(3)), "{shell:?}");
        assert!(text2.text().contains("hello"), "{shell:?}");
        let runs = std::fs::read_to_string(&count).unwrap_or_default();
        assert_eq!(runs, "ran\n", "{shell:?}");
    }
}

/// A second start that cannot send the step's output from its first byte
/// (the first pieces are gone) or finds a forged status must not end as
/// if its exit code were the step's: it ends unmarked, and the runner
/// follows it as a cut.
#[tokio::test]
async fn a_second_start_counts_a_gap_and_never_takes_its_own_code_for_the_steps() {
    for shell in shells() {
        let (dir, files) = state();
        let script = "yes | head -c 104857600; echo last-line; exit 9";
        let start = files.start_argv("", Script::Inline(script));
        let exec = HostExec::new(&shell, &[]);
        assert_eq!(
            to_end(&exec, &files, &start).await,
            StepEnd::Exited(9),
            "{shell:?}"
        );
        let (again, text, (out, _)) = logged(&exec, &files, &start).await;
        assert_eq!(
            again,
            StepEnd::Exited(9),
            "{shell:?}: {}",
            runner_lines(&text)
        );
        let lost = lost_bytes(&text);
        assert!(
            lost > 0,
            "{shell:?}: no gap was told: {}",
            runner_lines(&text)
        );
        assert_eq!(
            out.len() as u64 + lost,
            104857600 + 10,
            "{shell:?}: {}",
            runner_lines(&text)
        );
        assert!(out.ends_with("y\nlast-line\n"), "{shell:?}");

        // A step whose status it forged: out of range, then not a number.
        let files = StepFiles::new(&dir.path().display().to_string(), "u");
        let start = files.start_argv("", Script::Inline("echo hi; exit 3"));
        assert_eq!(
            to_end(&exec, &files, &start).await,
            StepEnd::Exited(3),
            "{shell:?}"
        );
        for forged in ["999\n", "7x\n"] {
            std::fs::write(dir.path().join("stepio-u.status"), forged)
                .unwrap_or_else(|e| panic!("{e}"));
            let end = to_end(&exec, &files, &start).await;
            assert!(
                matches!(end, StepEnd::Lost(_)),
                "{shell:?} {forged:?}: {end:?}"
            );
        }
    }
}

/// A follow's special endings are marked whatever the exec's environment
/// holds: a step variable named like the start's own `second` must not
/// make a gap look like a cut, nor one named `key` change its marks' key.
#[test]
fn a_follow_marks_its_gap_even_with_a_step_variable_named_second() {
    for shell in shells() {
        let (dir, files) = state();
        // Piece 0 is gone and piece 1 is there: the next bytes are lost.
        std::fs::write(dir.path().join("stepio-t.out.1"), "later\n")
            .unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dir.path().join("stepio-t.status"), "0\n").unwrap_or_else(|e| panic!("{e}"));
        let argv = files.follow_argv(Offsets::default());
        let mark = end_mark(end_key(&argv).unwrap_or_default(), FOLLOW_GAP_STDOUT as u8);
        let out = std::process::Command::new(shell[0])
            .args(&shell[1..])
            .args(&argv[1..])
            .env("second", "1")
            .env("key", "0000")
            .output()
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(out.status.code(), Some(FOLLOW_GAP_STDOUT), "{shell:?}");
        assert!(out.stdout.ends_with(&mark), "{shell:?}: {:?}", out.stdout);
        assert!(out.stderr.ends_with(&mark), "{shell:?}: {:?}", out.stderr);
    }
}

#[tokio::test]
async fn a_supervisor_gone_without_a_status_is_lost_not_a_success() {
    for shell in shells() {
        let (_dir, files) = state();
        // The step kills its own supervisor (its parent), then goes on.
        let start = files.start_argv("", Script::Inline("echo up; kill -9 $PPID; echo after"));
        let exec = HostExec::new(&shell, &[Some(3)]);
        let end = to_end(&exec, &files, &start).await;
        assert!(matches!(end, StepEnd::Lost(_)), "{shell:?}: {end:?}");
    }
}

#[tokio::test]
async fn a_forged_status_is_lost_not_a_code() {
    for shell in shells() {
        let (dir, files) = state();
        // The step writes its own status file as it ends: an impossible
        // status, which the runner may read before the supervisor writes
        // the real one.
        let status = format!("{}/stepio-t.status", dir.path().display());
        let script = format!("echo hi; trap 'echo -1 > {status}' EXIT");
        let start = files.start_argv("", Script::Inline(&script));
        let exec = HostExec::new(&shell, &[Some(1)]);
        let end = to_end(&exec, &files, &start).await;
        // The supervisor writes the real status after the step's trap; a
        // read between the two sees the forgery, which is no code.
        assert!(
            matches!(end, StepEnd::Exited(0) | StepEnd::Lost(_)),
            "{shell:?}: {end:?}"
        );
        // A runner that read the forgery is done before the supervisor,
        // which writes the real status once its recorders end: the next
        // forgery goes after that, or the real status would overwrite it.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let real = |text: Option<String>| {
            text.and_then(|t| t.strip_suffix('\n').map(str::to_owned))
                .is_some_and(|line| line.starts_with("0 ") && parse_status(&line) == Some(0))
        };
        while !real(std::fs::read_to_string(&status).ok()) {
            assert!(
                std::time::Instant::now() < deadline,
                "{shell:?}: the supervisor never wrote the step's status"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        std::fs::write(&status, "999\n").unwrap_or_else(|e| panic!("{e}"));
        let end = status_of(&shell, &files).await;
        assert!(matches!(end, StepEnd::Lost(_)), "{shell:?}: {end:?}");
    }
}

async fn status_of(shell: &[&str], files: &StepFiles) -> StepEnd {
    let exec = HostExec::new(shell, &[]);
    let (log, _) = RunLog::memory();
    status(&exec, files, FOLLOW_NOW, &log, &CancellationToken::new())
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
async fn an_interrupt_after_a_cut_kills_the_step() {
    for shell in shells() {
        let (dir, files) = state();
        let marker = dir.path().join("child");
        // The step's child records its pid, then both wait for ever.
        let script = format!("sleep 1000 & echo $! > {}; echo up; wait", marker.display());
        let start = files.start_argv("", Script::Inline(&script));
        let exec = HostExec::new(&shell, &[Some(3)]);
        let (log, _) = RunLog::memory();
        let cancel = CancellationToken::new();
        let stepping = run_step(&exec, &files, &start, &log, &cancel, FOLLOW_NOW);
        let cancelling = async {
            // Interrupt once the follow is under way (its exec recorded)
            // and the step's child is known; there is no event for either.
            let under_way = async {
                while exec.execs.lock().unwrap_or_else(|p| p.into_inner()).len() < 2
                    || std::fs::read_to_string(&marker).map_or(true, |s| !s.ends_with('\n'))
                {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            };
            let waited = tokio::time::timeout(Duration::from_secs(30), under_way).await;
            cancel.cancel();
            assert!(waited.is_ok(), "the follow never started");
        };
        let (end, ()) = tokio::join!(stepping, cancelling);
        assert_eq!(end.ok(), Some(StepEnd::Interrupted), "{shell:?}");
        let pid = std::fs::read_to_string(&marker).unwrap_or_default();
        let running = || {
            std::fs::read_to_string(format!("/proc/{}/stat", pid.trim()))
                .is_ok_and(|stat| !stat.contains(") Z "))
        };
        // SIGKILL is delivered when the process is next scheduled: wait
        // for it to be dead, with a deadline.
        let gone = tokio::time::timeout(Duration::from_secs(10), async {
            while running() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        let alive = gone.is_err();
        assert!(!alive, "{shell:?}: the step's child {pid} still runs");
    }
}

/// A step that prints 100 MiB, cut after its first bytes: by the time
/// the follow gets there, the pieces before the last 64 MiB are gone. The
/// log says exactly how many bytes, and the offsets go on past them.
#[tokio::test]
async fn bytes_no_longer_kept_are_counted_in_the_log_never_a_silent_gap() {
    for shell in shells() {
        // The first exec is cut after 10 bytes, and the runner comes
        // back only once the step has ended: its first pieces are gone.
        let script = "yes | head -c 104857600; echo last-line; exit 9";
        let (end, text, _, (out, _)) = run_script_held(&shell, &[Some(10)], script, true).await;
        assert_eq!(end, StepEnd::Exited(9), "{shell:?}");
        let total: u64 = 104857600 + "last-line\n".len() as u64;
        let lost = lost_bytes(&text);
        assert!(lost > 0, "{shell:?}: no gap was told");
        // Every byte is in the log or counted as lost, none twice.
        assert_eq!(
            out.len() as u64 + lost,
            total,
            "{shell:?}: {}",
            runner_lines(&text)
        );
        assert!(out.ends_with("y\nlast-line\n"), "{shell:?}");
        assert!(out.starts_with("y\ny\ny\ny\ny\n"), "{shell:?}");
    }
}

/// Each file made on the state folder's disk costs more than a process
/// start: a quiet step makes six, and the steps before it leave none.
#[tokio::test]
async fn a_step_makes_six_files_and_removes_the_steps_before_it() {
    for shell in shells() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let state = dir.path().display().to_string();
        std::fs::write(dir.path().join("step-abc.sh"), "true").unwrap_or_else(|e| panic!("{e}"));
        let exec = HostExec::new(&shell, &[]);
        for id in ["one", "two"] {
            let files = StepFiles::new(&state, id);
            let start = files.start_argv("", Script::Inline("echo hi"));
            let end = to_end(&exec, &files, &start).await;
            assert_eq!(end, StepEnd::Exited(0), "{shell:?}");
        }
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap_or_else(|e| panic!("{e}"))
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            // Only where the host's memory cgroup counted an OOM kill:
            // the tests' own OOM kills, on a host that nests them.
            .filter(|name| !name.ends_with(".oom"))
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "step-abc.sh",
                "stepio-two.e",
                "stepio-two.err.0",
                "stepio-two.o",
                "stepio-two.out.0",
                "stepio-two.pid",
                "stepio-two.status"
            ],
            "{shell:?}"
        );
    }
}

#[test]
fn a_status_is_a_number_from_0_to_255() {
    for good in ["0\n", "255\n", "7"] {
        assert!(parse_status(good).is_some(), "{good:?}");
    }
    for bad in ["", "\n", "-1", "256", "1e3", "0x1", " 1", "1\n\n", "9999"] {
        assert_eq!(parse_status(bad), None, "{bad:?}");
    }
}

/// Runs `start` as a resumed step: one an earlier runner may have
/// started, whose log had `from` of it.
async fn resumed(
    exec: &HostExec,
    files: &StepFiles,
    start: &[String],
    from: Offsets,
) -> (StepEnd, (String, String)) {
    let (log, _) = RunLog::memory();
    let outputs = Outputs::attach(&log);
    let follow = Follow {
        from: Some(from),
        ..FOLLOW_NOW
    };
    let end = run_step(exec, files, start, &log, &CancellationToken::new(), follow)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    log.flush(Duration::from_secs(30)).await;
    (end, outputs.get())
}

#[tokio::test]
async fn a_resumed_step_is_followed_from_its_logs_bytes_and_never_run_twice() {
    for shell in shells() {
        let (dir, files) = state();
        let runs = dir.path().join("runs");
        let script = format!("echo ran >> '{}'; {NUMBERED}", runs.display());
        let start = files.start_argv("", Script::Inline(&script));
        // The earlier runner: the step ran to its end under it.
        assert_eq!(
            to_end(&HostExec::new(&shell, &[]), &files, &start).await,
            StepEnd::Exited(7)
        );
        let all = numbered_lines();
        let had = 1234;
        let exec = HostExec::new(&shell, &[]);
        let (end, (out, err)) = resumed(
            &exec,
            &files,
            &start,
            Offsets {
                stdout: had,
                stderr: 0,
            },
        )
        .await;
        assert_eq!(end, StepEnd::Exited(7), "{shell:?}");
        assert_eq!(out, all[had as usize..], "{shell:?}");
        assert_eq!(err, "done\n", "{shell:?}");
        let ran = std::fs::read_to_string(&runs).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ran, "ran\n", "the step ran again under {shell:?}");
    }
}

#[tokio::test]
async fn a_resumed_step_that_never_started_is_started() {
    for shell in shells() {
        let (_dir, files) = state();
        let exec = HostExec::new(&shell, &[]);
        let start = files.start_argv("", Script::Inline(NUMBERED));
        let (end, (out, err)) = resumed(&exec, &files, &start, Offsets::default()).await;
        assert_eq!(end, StepEnd::Exited(7), "{shell:?}");
        assert_eq!(out, numbered_lines(), "{shell:?}");
        assert_eq!(err, "done\n", "{shell:?}");
        let execs = exec.execs.lock().unwrap_or_else(|p| p.into_inner()).len();
        assert_eq!(execs, 2, "a probe, then the start: {shell:?}");
    }
}

#[tokio::test]
async fn an_engines_words_and_a_follows_own_errors_are_never_the_steps_output() {
    for shell in shells() {
        let (_dir, files) = state();
        let exec = HostExec::new(&shell, &[Some(100), None, Some(2000)]).with_faults(&[
            Fault::Refused,
            Fault::ShellError,
            Fault::Refused,
            Fault::ShellError,
        ]);
        let start = files.start_argv("", Script::Inline(NUMBERED));
        let (end, text, (out, err)) = logged(&exec, &files, &start).await;
        assert_eq!(
            end,
            StepEnd::Exited(7),
            "{shell:?}: {}",
            runner_lines(&text)
        );
        assert_eq!(out, numbered_lines(), "{shell:?}: {}", runner_lines(&text));
        assert_eq!(err, "done\n", "{shell:?}: {}", runner_lines(&text));
        assert!(
            text.contains("the environment answered, before the step's command began: OCI runtime exec failed"),
            "{shell:?}: {}",
            runner_lines(&text)
        );
    }
}

#[tokio::test]
async fn a_step_whose_environment_runs_nothing_more_is_killed_and_its_status_read() {
    for shell in shells() {
        let (dir, files) = state();
        let mut exec = HostExec::new(&shell, &[Some(100)]);
        exec.full_until_killed = true;
        // The step has ended before the runner tries again.
        exec.held = Some(dir.path().join("stepio-t.status"));
        let start = files.start_argv("", Script::Inline(NUMBERED));
        let (end, text, (out, err)) = logged(&exec, &files, &start).await;
        assert_eq!(
            end,
            StepEnd::Exited(7),
            "{shell:?}: {}",
            runner_lines(&text)
        );
        assert_eq!(out, numbered_lines(), "{shell:?}");
        assert_eq!(err, "done\n", "{shell:?}");
        assert!(
            text.contains("killing the step's processes, then reading how it ended"),
            "{shell:?}: {}",
            runner_lines(&text)
        );
    }
}

#[tokio::test]
async fn a_variable_named_like_a_part_of_the_script_is_kept_as_it_is() {
    for shell in shells() {
        let (_dir, files) = state();
        let exec = HostExec::new(&shell, &[]);
        let start = files.start_argv(
            "CFLAGS=-O2; FOLLOW_ME=1; export CFLAGS FOLLOW_ME; ",
            Script::Inline("echo \"$CFLAGS $FOLLOW_ME\""),
        );
        let (end, text, (out, _)) = logged(&exec, &files, &start).await;
        assert_eq!(end, StepEnd::Exited(0), "{shell:?}: {text}");
        assert_eq!(out, "-O2 1\n", "{shell:?}: {text}");
    }
}

/// Past its first piece, a loud stream's joining `dd` and recorder run
/// at the lowest priority, and its `tee` at the step's: a reniced `tee`
/// took a fifth to a quarter off a loud step's throughput. The recorder
/// finds the `dd` by the pipe it holds as fd 5. The step looks both up
/// itself (the `tee` reads the step's stdout; the `dd` reads what the
/// `tee` writes) and waits, with a deadline, until the `dd` is at 19.
#[tokio::test]
async fn a_loud_streams_joining_dd_yields_to_the_step_and_its_tee_does_not() {
    const SCRIPT: &str = r#"yes | head -c 9437184
nice_of() { read -r line < "/proc/$1/stat" || return 1; set -- ${line##*) }; echo "${17}"; }
i=0
while [ $i -lt 400 ]; do
  tee=; dd=
  for p in /proc/[0-9]*; do [ "$p/fd/0" -ef /proc/$$/fd/1 ] 2>/dev/null && tee=${p#/proc/}; done
  [ -n "$tee" ] && for p in /proc/[0-9]*; do [ "$p/fd/0" -ef "/proc/$tee/fd/1" ] 2>/dev/null && dd=${p#/proc/}; done
  if [ -n "$dd" ] && [ "$(nice_of "$dd")" = 19 ]; then
    [ "$(nice_of "$tee")" = "$(nice_of $$)" ] && echo "dd at 19, tee as the step" >&2 || echo "tee at $(nice_of "$tee")" >&2
    exit 0
  fi
  sleep 0.05; i=$((i + 1))
done
echo "tee $tee at $(nice_of "$tee"), dd $dd at $(nice_of "$dd")" >&2
exit 1"#;
    for shell in shells() {
        let (end, text, _, (out, err)) = run_script(&shell, &[], SCRIPT).await;
        assert_eq!(
            (end, err.as_str()),
            (StepEnd::Exited(0), "dd at 19, tee as the step\n"),
            "{shell:?}: {}",
            runner_lines(&text)
        );
        assert_eq!(out.len(), 9437184, "{shell:?}");
    }
}

/// An exec whose every stream breaks at once, as in an environment with
/// no process left to run it.
#[derive(Default)]
struct Starved(std::sync::atomic::AtomicU32);

#[async_trait]
impl StepExec for Starved {
    async fn exec(
        &self,
        _: &[String],
        _: &mut (dyn tokio::io::AsyncWrite + Send + Unpin),
        _: &mut (dyn tokio::io::AsyncWrite + Send + Unpin),
        _: &CancellationToken,
    ) -> Result<ExecEnd, ExecutorError> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(ExecEnd::Cut("can't fork".into()))
    }

    async fn kill(&self, _: &str) -> Result<(), ExecutorError> {
        Ok(())
    }
}

/// A status read and a probe whose streams break at once are tried 11
/// times, as a follow is, with pauses that grow (50 ms, doubling to
/// 800 ms: 5.55 s in all), not 11 times in a row at once.
#[tokio::test(start_paused = true)]
async fn a_status_read_or_probe_cut_at_once_is_tried_again_after_growing_pauses() {
    let (_dir, files) = state();
    let (log, _) = RunLog::memory();
    let interrupt = CancellationToken::new();
    let pauses = Duration::from_millis(50 + 100 + 200 + 400 + 800 * 6);

    for probe in [false, true] {
        let exec = Starved::default();
        let before = tokio::time::Instant::now();
        let failed = if probe {
            started(&exec, &files, FOLLOW_NOW, &log, &interrupt)
                .await
                .err()
        } else {
            status(&exec, &files, FOLLOW_NOW, &log, &interrupt)
                .await
                .err()
        };
        assert!(
            matches!(failed, Some(ExecutorError::LostExitStatus { .. })),
            "probe {probe}: {failed:?}"
        );
        assert_eq!(exec.0.into_inner(), MAX_IDLE_CUTS + 1, "probe {probe}");
        assert_eq!(before.elapsed(), pauses, "probe {probe}");
    }
}

/// An exec whose streams carry what a wrapper writes, `before` the real
/// end marks (with the key of the exec's argv, and `status`) if there are
/// any, and that then never ends: an engine slow to close a stream after
/// the marks, or one whose connection lingers.
struct Lingering {
    before: Vec<u8>,
    status: Option<u8>,
    execs: std::sync::atomic::AtomicU32,
}

#[async_trait]
impl StepExec for Lingering {
    async fn exec(
        &self,
        argv: &[String],
        stdout: &mut (dyn tokio::io::AsyncWrite + Send + Unpin),
        stderr: &mut (dyn tokio::io::AsyncWrite + Send + Unpin),
        interrupt: &CancellationToken,
    ) -> Result<ExecEnd, ExecutorError> {
        self.execs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let io = |e: std::io::Error| ExecutorError::backend("test output", e.to_string());
        let head = [BEGIN_MARK, &self.before].concat();
        stdout.write_all(&head).await.map_err(io)?;
        stderr.write_all(&head).await.map_err(io)?;
        if let Some(status) = self.status {
            let mark = end_mark(end_key(argv).unwrap_or_default(), status);
            stdout.write_all(&mark).await.map_err(io)?;
            // The marks are split across writes, as a stream may carry them.
            let (head, tail) = mark.split_at(5);
            stderr.write_all(head).await.map_err(io)?;
            tokio::task::yield_now().await;
            stderr.write_all(tail).await.map_err(io)?;
        }
        interrupt.cancelled().await;
        Ok(ExecEnd::Interrupted)
    }

    async fn kill(&self, _: &str) -> Result<(), ExecutorError> {
        Ok(())
    }
}

/// Runs a step through `exec` until it ends or a minute of (paused) time
/// passes: how it ended, if it did, and its stdout as the log has it.
async fn within_a_minute(exec: &Lingering) -> (Option<StepEnd>, String) {
    let (_dir, files) = state();
    let (log, _) = RunLog::memory();
    let outputs = Outputs::attach(&log);
    let interrupt = CancellationToken::new();
    let start = files.start_argv("", Script::Inline("true"));
    let ended = tokio::time::timeout(
        Duration::from_secs(60),
        run_step(exec, &files, &start, &log, &interrupt, FOLLOW_NOW),
    )
    .await
    .ok()
    .map(|ended| ended.unwrap_or_else(|e| panic!("{e}")));
    (ended, outputs.get().0)
}

/// Both end marks are the step's end: the runner does not wait for the
/// engine to close the exec's stream after them (through Docker, another
/// 3 to 6 ms a step).
#[tokio::test(start_paused = true)]
async fn a_step_ends_at_its_end_marks_not_when_the_engine_closes_its_stream() {
    let exec = Lingering {
        before: b"built\n".to_vec(),
        status: Some(3),
        execs: Default::default(),
    };
    let (ended, stdout) = within_a_minute(&exec).await;
    assert_eq!(ended, Some(StepEnd::Exited(3)));
    assert_eq!(stdout, "built\n");
    assert_eq!(exec.execs.into_inner(), 1);
}

/// A mark the step printed, with no key or another exec's, is output and
/// ends nothing, even as the last bytes before a stream that lingers.
#[tokio::test(start_paused = true)]
async fn a_mark_without_the_execs_key_ends_nothing_and_is_output() {
    for forged in [
        b"\0knotless-step-end 000\n".to_vec(),
        end_mark("0123456789abcdef", 0),
    ] {
        let exec = Lingering {
            before: forged.clone(),
            status: None,
            execs: Default::default(),
        };
        let (ended, stdout) = within_a_minute(&exec).await;
        assert_eq!(ended, None, "{forged:?}");
        assert_eq!(stdout.as_bytes(), &forged[..]);
        let exec = Lingering {
            before: forged.clone(),
            status: Some(1),
            execs: Default::default(),
        };
        let (ended, stdout) = within_a_minute(&exec).await;
        assert_eq!(ended, Some(StepEnd::Exited(1)), "{forged:?}");
        assert_eq!(stdout.as_bytes(), &forged[..]);
    }
}

/// A gated start on the host: `argv` under `shell` with `stdin` as its
/// standard input; its exit code, and whether it made the step's pipes.
async fn gated_on_host(
    shell: &[&str],
    argv: &[String],
    stdin: &[u8],
    files: &StepFiles,
) -> (i32, bool) {
    let exec = HostExec::new(shell, &[]);
    let mut cmd = exec.command(argv);
    cmd.stdin(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{e}"));
    let mut input = child.stdin.take().unwrap_or_else(|| panic!("no stdin"));
    input
        .write_all(stdin)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    drop(input);
    let out = child
        .wait_with_output()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let made = Path::new(&format!("{}.o", files.prefix)).exists();
    (out.status.code().unwrap_or(-1), made)
}

/// A start opened ahead runs nothing until its line comes: its stdin
/// closed, or any other line, and it ends with 0 having made nothing; on
/// `go` it is the step's start.
#[tokio::test]
async fn a_gated_start_runs_nothing_without_its_line() {
    for shell in shells() {
        for (stdin, runs) in [
            (&b""[..], false),
            (b"stop\n", false),
            (b"go", false),
            (b"go\n", true),
        ] {
            let (_dir, files) = state();
            let argv = files.gated_start_argv("", Script::Inline("echo ran; exit 4"));
            let (code, made) = gated_on_host(&shell, &argv, stdin, &files).await;
            assert_eq!(made, runs, "{shell:?} {stdin:?}");
            assert_eq!(code, if runs { 4 } else { 0 }, "{shell:?} {stdin:?}");
        }
    }
}

/// A released start whose exec broke before the step began.
struct DiedAtTheGate;

#[async_trait]
impl GatedStart for DiedAtTheGate {
    async fn release(
        self: Box<Self>,
        _: &mut (dyn AsyncWrite + Send + Unpin),
        _: &mut (dyn AsyncWrite + Send + Unpin),
        _: &CancellationToken,
    ) -> Result<ExecEnd, ExecutorError> {
        Ok(ExecEnd::Cut(
            "the connection was dropped while it waited".into(),
        ))
    }
}

/// A start opened ahead whose exec died at its gate (an idle connection
/// dropped while the step before ran) never started the step: the
/// runner finds no pipes and starts it then, once, with its own code and
/// output; one that did start is followed, never run twice.
#[tokio::test]
async fn a_start_that_died_at_its_gate_is_started_then_never_twice() {
    for shell in shells() {
        let (_dir, files) = state();
        let exec = HostExec::new(&shell, &[]);
        let script = "echo out; exit 5";
        let argv = files.gated_start_argv("", Script::Inline(script));
        let (log, _) = RunLog::memory();
        let end = run_step_released(
            &exec,
            &files,
            &argv,
            Some(Box::new(DiedAtTheGate)),
            &log,
            &CancellationToken::new(),
            FOLLOW_NOW,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(end, StepEnd::Exited(5), "{shell:?}");
        let execs = exec.execs.lock().unwrap_or_else(|p| p.into_inner()).clone();
        // The probe, then the start without its gate.
        assert_eq!(execs.len(), 2, "{shell:?}: {execs:?}");
        assert!(!execs[1][2].contains("read -r go"), "{shell:?}");

        // Released after all, and started: the probe finds it, and it is
        // followed, not started again.
        let (_dir, files) = state();
        let script = format!("echo once >> {}.count; exit 6", files.prefix);
        let argv = files.gated_start_argv("", Script::Inline(&script));
        let (code, made) = gated_on_host(&shell, &argv, b"go\n", &files).await;
        assert!(made && code == 6, "{shell:?}");
        let exec = HostExec::new(&shell, &[]);
        let end = run_step_released(
            &exec,
            &files,
            &argv,
            Some(Box::new(DiedAtTheGate)),
            &log,
            &CancellationToken::new(),
            FOLLOW_NOW,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(end, StepEnd::Exited(6), "{shell:?}");
        let count = std::fs::read_to_string(format!("{}.count", files.prefix)).unwrap_or_default();
        assert_eq!(count, "once\n", "{shell:?}");
    }
}

/// What a step cost, as the wrapper measured it and the log was told:
/// from the start's end mark, or from the status file after a cut.
async fn usage_of(
    shell: &[&str],
    script: &str,
    cuts: &[Option<u64>],
) -> executor_core::usage::StepUsage {
    let (_dir, files) = state();
    let exec = HostExec::new(shell, cuts);
    let (log, _) = RunLog::memory();
    let start = files.start_argv("", Script::Inline(script));
    let end = run_step(
        &exec,
        &files,
        &start,
        &log,
        &CancellationToken::new(),
        FOLLOW_NOW,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(end, StepEnd::Exited(0), "{shell:?}: {script} cuts {cuts:?}");
    log.take_usage()
        .unwrap_or_else(|| panic!("{shell:?}: no usage for {script}"))
}

#[tokio::test]
async fn a_step_reports_its_cpu_time_and_the_peak_of_its_largest_process() {
    const BUSY: &str = "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done";
    const IDLE: &str = "sleep 0.3";
    // dd holds a 60 MB block it cannot write on while sleep does not read.
    const HOLDS_60MB: &str = "dd if=/dev/zero bs=60000000 count=1 2>/dev/null | sleep 1";
    for shell in shells() {
        let busy = usage_of(&shell, BUSY, &[]).await;
        let idle = usage_of(&shell, IDLE, &[]).await;
        assert!(
            busy.cpu_ms() > idle.cpu_ms() && busy.cpu_ms() >= 50,
            "{shell:?}: busy {busy:?}, idle {idle:?}"
        );
        let big = usage_of(&shell, HOLDS_60MB, &[]).await;
        assert!(big.max_rss_bytes > Some(50_000_000), "{shell:?}: {big:?}");
        assert!(idle.max_rss_bytes < Some(50_000_000), "{shell:?}: {idle:?}");
        // Cut before its end: the status file has it too.
        let cut = usage_of(&shell, HOLDS_60MB, &[Some(begun(0))]).await;
        assert!(cut.max_rss_bytes > Some(50_000_000), "{shell:?}: {cut:?}");
    }
}

/// The pid file outlives the supervisor, and a busy environment reuses
/// pids (32768 of them by default): a kill after the step ended must not
/// take the process that now has the supervisor's old pid for it.
#[tokio::test]
async fn a_kill_after_the_step_ended_spares_the_process_that_got_its_pid() {
    for shell in shells() {
        let (_dir, files) = state();
        let exec = HostExec::new(&shell, &[]);
        let start = files.start_argv("", Script::Inline("true"));
        assert_eq!(
            to_end(&exec, &files, &start).await,
            StepEnd::Exited(0),
            "{shell:?}"
        );
        // An unrelated process, given the supervisor's old pid: the pid
        // file's first word is replaced, the rest of it kept. A pid comes
        // round again only after the other 32767 have been used, so the
        // process that gets it started later than the supervisor: one
        // that started in the same clock tick is not kept.
        let written = std::fs::read_to_string(files.pid_file()).unwrap_or_default();
        let rest = written.split_once(' ').map_or("", |(_, rest)| rest);
        let started = |pid: u32| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let after = stat.rsplit_once(") ").map_or("", |(_, after)| after);
            after.split(' ').nth(19).unwrap_or_default().to_string()
        };
        let mut other = loop {
            let child = std::process::Command::new("sleep")
                .arg("30")
                .spawn()
                .unwrap_or_else(|e| panic!("{e}"));
            if rest.is_empty() || started(child.id()) != rest.trim() {
                break child;
            }
            let mut same_tick = child;
            let _ = same_tick.kill();
            let _ = same_tick.wait();
        };
        let reused = if rest.is_empty() {
            format!("{}\n", other.id())
        } else {
            format!("{} {rest}", other.id())
        };
        std::fs::write(files.pid_file(), reused).unwrap_or_else(|e| panic!("{e}"));
        let killed = std::process::Command::new(shell[0])
            .args(&shell[1..])
            .arg("-c")
            .arg(files.kill_script())
            .status()
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(killed.success(), "{shell:?}");
        let alive = other.try_wait().unwrap_or_else(|e| panic!("{e}")).is_none();
        let _ = other.kill();
        let _ = other.wait();
        assert!(
            alive,
            "{shell:?}: the kill took a process that only had the supervisor's old pid"
        );
    }
}
