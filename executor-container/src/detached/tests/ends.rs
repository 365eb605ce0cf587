//! End marks, gated starts and what a step cost

use super::*;

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
    // The CPU time is what the shell's `times` says, which each shell
    // words its own way (busybox `0m0.020s`, dash `0m0.020000s`): bash
    // too, the `sh` of some images.
    let mut shells = shells();
    if Path::new("/bin/bash").exists() {
        shells.push(vec!["bash"]);
    }
    for shell in shells {
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
