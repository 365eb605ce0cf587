//! A step's status, lost or forged, read after a cut, and the kill after it

use super::*;

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
    status(
        &exec,
        files,
        None,
        FOLLOW_NOW,
        &log,
        &CancellationToken::new(),
    )
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

#[test]
fn a_status_is_a_number_from_0_to_255() {
    for good in ["0\n", "255\n", "7"] {
        assert!(parse_status(good).is_some(), "{good:?}");
    }
    for bad in ["", "\n", "-1", "256", "1e3", "0x1", " 1", "1\n\n", "9999"] {
        assert_eq!(parse_status(bad), None, "{bad:?}");
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
            status(&exec, &files, None, FOLLOW_NOW, &log, &interrupt)
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
