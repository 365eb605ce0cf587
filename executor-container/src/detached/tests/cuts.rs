//! Steps whose stream is cut, followed again and never started twice

use super::*;

async fn run_numbered(
    shell: &[&str],
    cuts: &[Option<u64>],
) -> (StepEnd, String, usize, (String, String)) {
    run_script(shell, cuts, NUMBERED).await
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
