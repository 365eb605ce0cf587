//! What the terminal and the log file show

use super::*;

/// On a terminal (`--log -`), a step's control bytes are shown in caret
/// notation: it cannot clear the screen or draw over the runner's lines
/// with `\r`. Piped, the log keeps them as they were.
#[test]
fn on_a_terminal_a_steps_control_bytes_cannot_draw_over_the_log() {
    let case = Case::new();
    let steps =
        "draw\tprintf 'ok\\\\033[2J\\\\r==> step draw: success (exit 0, 0.001s)\\\\n'; exit 1\n";
    let cmd = case.run(steps, &["--log", "-"]);
    let mut line = String::new();
    for arg in std::iter::once(cmd.get_program()).chain(cmd.get_args()) {
        let arg = arg.to_str().unwrap();
        line.push_str(&format!("'{}' ", arg.replace('\'', r"'\''")));
    }
    // script(1) gives the runner a terminal of its own.
    let out = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("ok^[[2J^M==> step draw: success"),
        "{shown:?}"
    );
    assert!(!shown.contains('\u{1b}'), "{shown:?}");
    // Piped, the bytes are the step's.
    let piped = case.run(steps, &["--log", "-"]).output().unwrap();
    assert!(
        String::from_utf8_lossy(&piped.stdout).contains("ok\u{1b}[2J\r==> step draw"),
        "{}",
        String::from_utf8_lossy(&piped.stdout)
    );
}

/// A step that prints without end fills no disk: past `--log-limit` its
/// output leaves neither the log nor the events file, one line says so,
/// the steps go on, and the result and the events count what was dropped.
#[test]
fn a_loud_step_fills_neither_the_log_nor_the_events_past_the_limit() {
    let case = Case::new();
    let events = case.path("events.jsonl");
    let steps = "loud\tyes 0123456789abcdef | head -c 50000000\nnext\techo next-ran\n";
    let out = case
        .run(
            steps,
            &["--log-limit", "1m", "--events", events.to_str().unwrap()],
        )
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let log = case.log();
    assert!(log.len() < (1 << 20) + (16 << 10), "{} bytes", log.len());
    assert_eq!(log.matches("more output is dropped").count(), 1);
    assert!(log.contains("==> step loud: success (exit 0, "), "{log}");
    let events_len = std::fs::metadata(&events).unwrap().len();
    assert!(
        events_len < 4 << 20,
        "the events file holds {events_len} bytes"
    );
    let events = std::fs::read_to_string(&events).unwrap();
    let dropped = 50_000_000 - (1u64 << 20);
    assert!(
        events.contains(&format!("\"outputDroppedBytes\":{dropped}")),
        "{}",
        &events[events.len().saturating_sub(3000)..]
    );
    let result = case.result();
    assert_eq!(result.steps[0].output_dropped_bytes, dropped);
    assert_eq!(result.steps[1].status, executor_core::StepStatus::Success);
}

#[test]
fn diagnostics_piped_have_no_colour_codes() {
    let case = Case::new();
    let out = case
        // A process left behind holding the step's output: a debug line.
        .run("a\tsleep 3 & echo hi\n", &[])
        .env("RUNNER_LOG", "debug")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("DEBUG"), "{stderr}");
    assert!(!stderr.contains('\u{1b}'), "{stderr}");
}

#[test]
fn a_run_logging_to_a_file_shows_its_progress_on_the_terminal() {
    let case = Case::new();
    let out = case
        .run(
            "build\techo built-output\nfail\tprintf 'e\\\\033[2J' >&2; exit 4\nlast\techo never\n",
            &[],
        )
        .output()
        .unwrap();
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let err = stderr(&out);
    for line in [
        "==> step build: started",
        "==> step build: success (exit 0",
        "==> step fail: failed (exit 4",
        "==> step last: skipped after an earlier step failed",
        "==> summary:",
        "==> run cli-test: failed",
    ] {
        assert!(err.contains(line), "{line:?} missing from stderr: {err}");
    }
    // The runner's lines only: the step's output stays in the log file.
    assert!(!err.contains("built-output"), "{err}");
    assert!(case.log().contains("built-output"));
    assert!(!err.contains('\u{1b}'), "{err:?}");
    // With the log on stdout, the terminal already has it: nothing twice.
    let case = Case::new();
    let out = case
        .run("build\techo built-output\n", &["--log", "-"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0);
    assert!(!stderr(&out).contains("==> step build"), "{}", stderr(&out));
}
