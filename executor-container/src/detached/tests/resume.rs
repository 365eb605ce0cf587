//! Resumed steps, the files a step makes, and words that are not output

use super::*;

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
