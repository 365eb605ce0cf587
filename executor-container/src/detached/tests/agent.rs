//! The channel's agent (`knotless-agent`): steps it starts itself, the
//! shell's start where it has none, and a second start of a step it
//! leaves to the shell, which follows the first.

use super::channel::{through, through_with, HostChannel};
use super::*;

/// The command line of the step's parent, its supervisor.
const PARENT: &str = "tr '\\0' ' ' < /proc/$PPID/cmdline";

#[tokio::test]
async fn the_agent_supervises_steps_without_a_shell_of_its_own() {
    if AGENT.is_empty() {
        return;
    }
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

#[tokio::test]
async fn a_status_the_agents_supervisor_did_not_sign_is_refused() {
    if AGENT.is_empty() {
        return;
    }
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

#[tokio::test]
async fn a_channel_whose_agent_was_ended_starts_the_next_step_on_a_new_channel() {
    if AGENT.is_empty() {
        return;
    }
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

#[tokio::test]
async fn a_start_the_agent_leaves_to_the_shell_is_read_back_unsigned() {
    if AGENT.is_empty() {
        return;
    }
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
