//! The channel's agent (`knotless-agent`): steps it starts itself, the
//! shell's start where it has none, and a second start of a step it
//! leaves to the shell, which follows the first.

use super::channel::{through, through_with, HostChannel};
use super::*;
use std::sync::Arc;

/// The command line of the step's parent, its supervisor.
const PARENT: &str = "tr '\\0' ' ' < /proc/$PPID/cmdline";

#[cfg_attr(
    not(knotless_agent),
    ignore = "the agent was not built for this machine (see the build's warning)"
)]
#[tokio::test]
async fn the_agent_supervises_steps_without_a_shell_of_its_own() {
    for shell in shells() {
        let dir = tempfile::tempdir().unwrap();
        let channel = StepChannel::new(HostChannel::new(&shell, &[]));
        let exec = HostExec::new(&shell, &[]);
        let (end, text, (out, _)) = through(&channel, &exec, dir.path(), "s0", PARENT).await;
        assert_eq!(end, StepEnd::Exited(0), "{shell:?}: {text}");
        let parent = out.split(' ').next().unwrap_or_default();
        assert!(
            parent.ends_with(AGENT_FILE),
            "{shell:?}: the step's parent is {out:?}"
        );
        // Its variables, set from the prelude's records, reach it alone.
        // A variable unset before it is read is empty, as in a shell.
        let prelude =
            "export A='it'\\''s'; export B=\"$HOME\"; unset HOME; export D='gone'; unset D; export C=\"$D\"; ";
        let script = "echo \"$A|$B|${HOME-unset}|$C|${D-unset}\"; echo $$ > pid";
        let folder = dir.path().display().to_string();
        let (end, text, (out, _)) = through_with(
            &channel,
            &exec,
            dir.path(),
            "s1",
            (prelude, script),
            Some(&folder),
        )
        .await;
        let home = std::env::var("HOME").unwrap_or_default();
        assert_eq!(end, StepEnd::Exited(0), "{shell:?}: {text}");
        assert_eq!(out, format!("it's|{home}|unset||unset\n"), "{shell:?}");
        assert!(
            dir.path().join("pid").exists(),
            "{shell:?}: it ran in its folder"
        );
    }
}

#[tokio::test]
async fn without_the_agent_the_channels_shell_starts_steps() {
    for shell in shells() {
        let dir = tempfile::tempdir().unwrap();
        let channel = StepChannel::new(HostChannel::without_agent(&shell));
        let exec = HostExec::new(&shell, &[]);
        for i in 0..2 {
            let script = format!("{PARENT}; echo err {i} >&2; exit {i}");
            let (end, text, (out, err)) =
                through(&channel, &exec, dir.path(), &format!("s{i}"), &script).await;
            assert_eq!(end, StepEnd::Exited(i), "{shell:?}: {text}");
            let parent = out.split(' ').next().unwrap_or_default();
            assert!(
                !parent.ends_with(AGENT_FILE) && out.contains(" -c "),
                "{shell:?}: {out:?}"
            );
            assert_eq!(err, format!("err {i}\n"), "{shell:?}: {text}");
        }
    }
}

#[tokio::test]
async fn a_second_start_through_the_agent_follows_the_first() {
    for shell in shells() {
        let dir = tempfile::tempdir().unwrap();
        let channel = StepChannel::new(HostChannel::new(&shell, &[]));
        let exec = HostExec::new(&shell, &[]);
        let runs = dir.path().join("runs");
        let script = format!("echo ran >> '{}'; echo once; exit 4", runs.display());
        let script = script.as_str();
        let (end, text, (out, _)) = through(&channel, &exec, dir.path(), "s0", script).await;
        assert_eq!(
            (end, out.as_str()),
            (StepEnd::Exited(4), "once\n"),
            "{shell:?}: {text}"
        );
        // The same start again (its message sent twice): the pipes are
        // there, so it is the first's follow, not a second run.
        let (end, text, (out, _)) = through(&channel, &exec, dir.path(), "s0", script).await;
        assert_eq!(end, StepEnd::Exited(4), "{shell:?}: {text}");
        assert_eq!(out, "once\n", "{shell:?}: {text}");
        let runs = std::fs::read_to_string(&runs).unwrap();
        assert_eq!(runs, "ran\n", "{shell:?}: the step ran once");
    }
}

/// What a process of the step's user can do to a step's status after a
/// cut: write the status file itself, then end the step's supervisor and
/// copier, so that the stream ends and the runner reads the file back.
/// Here the step does it to itself, as a process an earlier step left
/// would do to a later one.
const FORGES_ITS_STATUS: &str = r#"printf '0 \n' > DIR/stepio-s1.status
for q in /proc/[0-9]*; do
  l=; { read -r l < "$q/stat"; } 2>/dev/null || continue; l=${l##*) }; set -- $l
  [ "$2" = "$PPID" ] && [ "${q#/proc/}" != $$ ] && kill -9 "${q#/proc/}"
done
kill -9 "$PPID"
exit 1"#;

#[cfg_attr(
    not(knotless_agent),
    ignore = "the agent was not built for this machine (see the build's warning)"
)]
#[tokio::test]
async fn a_status_the_agents_supervisor_did_not_sign_is_refused() {
    for shell in shells() {
        let dir = tempfile::tempdir().unwrap();
        let channel = StepChannel::new(HostChannel::new(&shell, &[]));
        let exec = HostExec::new(&shell, &[]);
        // A step before, so the channel has said its agent runs.
        let (end, text, _) = through(&channel, &exec, dir.path(), "s0", "true").await;
        assert_eq!(end, StepEnd::Exited(0), "{shell:?}: {text}");
        let script = FORGES_ITS_STATUS.replace(
            "DIR",
            &executor_core::script::quote(&dir.path().display().to_string()),
        );
        let (end, text, _) = through(&channel, &exec, dir.path(), "s1", &script).await;
        match &end {
            StepEnd::Lost(why) => assert!(why.contains("not signed"), "{shell:?}: {why}"),
            other => panic!("{shell:?}: {other:?}, not a lost status: {text}"),
        }
        // The file holds what the step wrote: the runner read it back.
        let forged = std::fs::read_to_string(dir.path().join("stepio-s1.status")).unwrap();
        assert_eq!(forged, "0 \n", "{shell:?}");
    }
}

#[cfg_attr(
    not(knotless_agent),
    ignore = "the agent was not built for this machine (see the build's warning)"
)]
#[tokio::test]
async fn a_channel_whose_agent_was_ended_starts_the_next_step_on_a_new_channel() {
    for shell in shells() {
        let dir = tempfile::tempdir().unwrap();
        let host = HostChannel::new(&shell, &[]);
        let channel = StepChannel::new(host.clone());
        let exec = HostExec::new(&shell, &[]);
        let (end, text, _) = through(&channel, &exec, dir.path(), "s0", "true").await;
        assert_eq!(end, StepEnd::Exited(0), "{shell:?}: {text}");
        // What a process the step left can do between two steps, so that
        // the next starts on an exec of its own, whose shell cannot sign
        // its status.
        assert_eq!(host.kill_agents().await, 1, "{shell:?}");
        let (end, text, (out, _)) = through(
            &channel,
            &exec,
            dir.path(),
            "s1",
            &format!("{PARENT}; exit 3"),
        )
        .await;
        assert_eq!(end, StepEnd::Exited(3), "{shell:?}: {text}");
        assert!(
            out.split(' ')
                .next()
                .unwrap_or_default()
                .ends_with(AGENT_FILE),
            "{shell:?}: the step's parent is {out:?}"
        );
        assert_eq!(
            host.opens.load(std::sync::atomic::Ordering::SeqCst),
            2,
            "{shell:?}: a new channel"
        );
        let execs = exec.execs.lock().unwrap();
        assert!(
            execs.iter().all(|argv| !marks_its_end(argv)),
            "{shell:?}: no start of the step's own: {execs:?}"
        );
    }
}

#[cfg_attr(
    not(knotless_agent),
    ignore = "the agent was not built for this machine (see the build's warning)"
)]
#[tokio::test]
async fn a_start_the_agent_leaves_to_the_shell_is_read_back_unsigned() {
    for shell in shells() {
        let dir = tempfile::tempdir().unwrap();
        // Cut mid-step, after the agent's hello: the channel has said it
        // runs, yet this start has no native line (a prelude the agent
        // does not read), so the shell starts it and cannot sign.
        let channel = StepChannel::new(HostChannel::new(&shell, &[Some(begun(5000))]));
        let exec = HostExec::new(&shell, &[]);
        let (end, text, (out, _)) = through_with(
            &channel,
            &exec,
            dir.path(),
            "s0",
            ("true; ", NUMBERED),
            None,
        )
        .await;
        assert_eq!(end, StepEnd::Exited(7), "{shell:?}: {text}");
        assert!(text.contains("following it on"), "{shell:?}");
        assert_eq!(out, numbered_lines(), "{shell:?}");
    }
}

/// Ends the step whose files are `DIR/stepio-ID` as a process an earlier
/// step left could, while no runner follows it: its supervisor and the
/// processes under it killed, and `0` written into its status file.
const FORGES_A_STEPS_STATUS: &str = r#"p=; read -r p _ < "$0.pid"
k=; for q in /proc/[0-9]*; do
  l=; { read -r l < "$q/stat"; } 2>/dev/null || continue; l=${l##*) }; set -- $l
  [ "$2" = "$p" ] && k="$k ${q#/proc/}"
done
kill -9 "$p" $k
printf '0 \n' > "$0.status""#;

/// Step `id` started through `channel` by a runner whose log is `path`,
/// which is killed once the step has printed `started`.
async fn started_then_killed(
    channel: &Arc<StepChannel>,
    exec: &HostExec,
    (id, files, start): (&str, &StepFiles, &[String]),
    path: &Path,
) {
    let log = RunLog::create_resumable(path).unwrap();
    log.emit(executor_core::events::Event::StepStarted {
        at: time::OffsetDateTime::now_utc(),
        attempt: 1,
        step: "waits".into(),
        index: 0,
    });
    let (seen_tx, mut seen) = tokio::sync::watch::channel(false);
    log.add_sink(Arc::new(move |event: &executor_core::events::Event| {
        if event
            .output_bytes()
            .is_some_and(|b| String::from_utf8_lossy(b).contains("started"))
        {
            seen_tx.send_replace(true);
        }
    }));
    let gate = channel.start(start.to_vec(), None, Signing::of(&log, id));
    let interrupt = CancellationToken::new();
    let first = run_step_released(exec, files, start, gate, &log, &interrupt, FOLLOW_NOW);
    tokio::select! {
        end = first => panic!("the step ended before its runner was killed: {end:?}"),
        seen = tokio::time::timeout(Duration::from_secs(30), seen.wait_for(|s| *s)) => {
            assert!(matches!(seen, Ok(Ok(_))), "the step never printed");
        }
    }
    assert!(log.flush(Duration::from_secs(30)).await);
}

/// Follows step `files` on as a runner that resumed the log at `path`.
async fn followed_by_a_new_runner(
    exec: &HostExec,
    (id, files, start): (&str, &StepFiles, &[String]),
    path: &Path,
) -> StepEnd {
    let (log, mark) = RunLog::resume(path).unwrap();
    let running = mark.running.clone().unwrap();
    assert!(mark.signing, "the first runner recorded that it signs");
    let follow = Follow {
        from: Some(running.offsets()),
        signed: Signing::followed(&log, id),
        ..FOLLOW_NOW
    };
    run_step(exec, files, start, &log, &CancellationToken::new(), follow)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

#[cfg_attr(
    not(knotless_agent),
    ignore = "the agent was not built for this machine (see the build's warning)"
)]
#[tokio::test]
async fn a_resumed_runner_takes_only_the_status_its_predecessors_start_signed() {
    for shell in shells() {
        let dir = tempfile::tempdir().unwrap();
        let logs = tempfile::tempdir().unwrap();
        let channel = StepChannel::new(HostChannel::new(&shell, &[]));
        let exec = HostExec::new(&shell, &[]);
        let folder = executor_core::script::quote(&dir.path().display().to_string());
        let waits = format!("echo started; until [ -e {folder}/go ]; do sleep 0.01; done; exit 1");
        for (id, forged) in [("s0", true), ("s1", false)] {
            let files = StepFiles::new(&dir.path().display().to_string(), id);
            let start = files.gated_start_argv("", Script::Inline(&waits));
            let path = logs.path().join(format!("{id}.log"));
            started_then_killed(&channel, &exec, (id, &files, &start), &path).await;
            if forged {
                let prefix = format!("{}/stepio-{id}", dir.path().display());
                let done = std::process::Command::new("sh")
                    .args(["-c", FORGES_A_STEPS_STATUS, &prefix])
                    .status()
                    .unwrap();
                assert!(done.success(), "{shell:?}");
            } else {
                std::fs::write(dir.path().join("go"), "").unwrap();
            }
            let end = followed_by_a_new_runner(&exec, (id, &files, &start), &path).await;
            match (forged, &end) {
                (true, StepEnd::Lost(why)) => {
                    assert!(why.contains("not signed"), "{shell:?}: {why}")
                }
                (false, StepEnd::Exited(1)) => {}
                _ => panic!("{shell:?}: {id} (forged: {forged}) ended as {end:?}"),
            }
        }
    }
}

/// A step a resumed runner finds not started (the log had nothing of it)
/// starts through the channel it was given, as the first runner's would
/// have: the agent is its parent, no exec of its own starts it, and its
/// status is recorded as signed.
#[cfg_attr(
    not(knotless_agent),
    ignore = "the agent was not built for this machine (see the build's warning)"
)]
#[tokio::test]
async fn a_step_a_resumed_runner_starts_anew_goes_through_the_channel() {
    for shell in shells() {
        let dir = tempfile::tempdir().unwrap();
        let channel = StepChannel::new(HostChannel::new(&shell, &[]));
        let exec = HostExec::new(&shell, &[]);
        let (log, text) = RunLog::memory();
        let outputs = Outputs::attach(&log);
        let files = StepFiles::new(&dir.path().display().to_string(), "s0");
        let start = files.gated_start_argv("", Script::Inline(&format!("{PARENT}; exit 3")));
        let gate = channel.start(start.clone(), None, Signing::of(&log, "s0"));
        let follow = Follow {
            from: Some(Offsets::default()),
            ..FOLLOW_NOW
        };
        let interrupt = CancellationToken::new();
        let end = run_step_released(&exec, &files, &start, gate, &log, &interrupt, follow)
            .await
            .unwrap();
        log.flush(Duration::from_secs(30)).await;
        assert_eq!(end, StepEnd::Exited(3), "{shell:?}: {}", text.text());
        let (out, _) = outputs.get();
        assert!(
            out.split(' ')
                .next()
                .unwrap_or_default()
                .ends_with(AGENT_FILE),
            "{shell:?}: the step's parent is {out:?}"
        );
        let execs = exec.execs.lock().unwrap();
        assert!(
            execs.iter().all(|argv| !marks_its_end(argv)),
            "{shell:?}: no start of the step's own: {execs:?}"
        );
        assert!(log.signs_statuses(), "{shell:?}");
    }
}

/// The agent itself, not a shell's loop, runs nothing of a message that
/// does not end in its end line (cut short, or a last line that only
/// looks like it), nor of a length that is not a number; a whole one
/// runs and is answered.
#[cfg_attr(
    not(knotless_agent),
    ignore = "the agent was not built for this machine (see the build's warning)"
)]
#[test]
fn the_agent_runs_nothing_of_a_message_cut_short() {
    runs_nothing_cut_short(AGENT_FILE);
}

#[cfg_attr(
    not(knotless_aarch64),
    ignore = "the aarch64 agent was not built, or qemu does not run aarch64 programs here"
)]
#[test]
fn the_agent_runs_nothing_of_a_message_cut_short_on_aarch64() {
    runs_nothing_cut_short(&format!("{AGENT_FILE}.aarch64"));
}

fn runs_nothing_cut_short(file: &str) {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    stage_agent(dir.path()).unwrap();
    let body = ": 0a\n(echo ran)";
    let run = |sent: String| {
        let mut child = std::process::Command::new(dir.path().join(file))
            .args(["eval \"$1\"", "0"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(sent.as_bytes()).unwrap();
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{sent:?}: {:?}", out.status);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    for sent in [
        format!("100\n{body}"),
        format!("{}\n{body}", body.len()),
        format!("x\n{body}\n#knotless-end"),
        format!(
            "{}\n{body}\n#knotless-nd",
            body.len() + "\n#knotless-nd".len()
        ),
        format!(
            "{}\n{body}\n#knotless-end ",
            body.len() + "\n#knotless-end ".len()
        ),
    ] {
        let out = run(sent.clone());
        assert_eq!(out, "\0knotless-channel-agent\n", "{sent:?} ran");
    }
    let whole = format!("{body}\n#knotless-end");
    let out = run(format!("{}\n{whole}", whole.len()));
    assert!(out.contains("ran\n"), "{out:?}");
    assert!(out.contains("knotless-channel-done 000 0a"), "{out:?}");
}
