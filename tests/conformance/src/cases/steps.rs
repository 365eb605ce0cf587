//! Steps: one environment, exit codes, skipping, variables.

use executor_core::{RunStatus, Step, StepStatus};

use crate::fixture::{assert_nothing_left, run_to_end, Fixture};
use crate::Backend;

/// A tool one step installs is found by the next: every step runs in the
/// same environment.
pub async fn state_persists_across_steps(backend: &dyn Backend) {
    let fx = Fixture::new("state");
    let install = r#"
        mkdir -p "$WORK_DIR/.tools"
        printf '#!/bin/sh\necho tool-says-hi\n' > "$WORK_DIR/.tools/mytool"
        chmod +x "$WORK_DIR/.tools/mytool"
        echo kept > state.txt
    "#;
    let spec = fx
        .spec(backend, "state")
        .step(Step::new("install", install))
        .step(Step::new(
            "use",
            "PATH=\"$WORK_DIR/.tools:$PATH\" mytool; [ \"$(cat state.txt)\" = kept ]",
        ));
    let (result, log) = run_to_end(backend, &spec).await;
    assert_eq!(result.status, RunStatus::Success, "{}", log.text());
    assert!(log.text().contains("tool-says-hi"));
    assert_nothing_left(backend, &fx.runner).await;
}

/// Exit codes 0, 1, 42 and 127 (command not found) reach the result as they are.
pub async fn exit_codes_propagate(backend: &dyn Backend) {
    for (script, code) in [
        ("exit 0", 0),
        ("exit 1", 1),
        ("exit 42", 42),
        // What Docker records for an exec whose client went away.
        ("exit 126", 126),
        ("no-such-command-anywhere", 127),
    ] {
        let fx = Fixture::new("exitcode");
        let spec = fx
            .spec(backend, "exit-code")
            .step(Step::new("exit", script));
        let (result, log) = run_to_end(backend, &spec).await;
        let step = &result.steps[0];
        assert_eq!(step.exit_code, Some(code), "{script}: {}", log.text());
        let (run, status) = if code == 0 {
            (RunStatus::Success, StepStatus::Success)
        } else {
            (RunStatus::Failed, StepStatus::Failed)
        };
        assert_eq!((result.status, step.status), (run, status), "{script}");
        assert_nothing_left(backend, &fx.runner).await;
    }
}

/// `sh -e`: a failing command inside a script fails the step.
pub async fn scripts_stop_at_first_error(backend: &dyn Backend) {
    let fx = Fixture::new("errexit");
    let spec = fx
        .spec(backend, "errexit")
        .step(Step::new("errexit", "false\necho should-not-print"));
    let (result, log) = run_to_end(backend, &spec).await;
    assert_eq!(result.steps[0].exit_code, Some(1));
    assert!(!log.text().contains("should-not-print"));
    assert_nothing_left(backend, &fx.runner).await;
}

/// A 1 MiB script runs: scripts travel as files, not as command-line
/// arguments (the kernel caps one at 128 KiB; on Kubernetes it would be
/// part of the exec's URL). Two steps share a script and a third is
/// another, so files named by content keep them apart.
pub async fn a_one_mib_script_runs(backend: &dyn Backend) {
    let fx = Fixture::new("big-script");
    let mut big = String::with_capacity(1 << 20);
    while big.len() < 1 << 20 {
        big.push_str("# filler filler filler filler filler filler filler filler filler\n");
    }
    big.push_str("echo big-script-ran-$((40 + 2))\n");
    let spec = fx
        .spec(backend, "big-script")
        .step(Step::new("big", big.clone()))
        .step(Step::new("again", big))
        .step(Step::new("small", "echo small-$((1 + 1))"));
    let (result, log) = run_to_end(backend, &spec).await;
    let text = log.text();
    assert_eq!(
        result.status,
        RunStatus::Success,
        "{}",
        result.error.unwrap_or_default()
    );
    assert_eq!(text.matches("big-script-ran-42").count(), 2, "{text}");
    assert!(text.contains("small-2"), "{text}");
    assert_nothing_left(backend, &fx.runner).await;
}

/// The first failing step ends the run; the rest are recorded as skipped.
pub async fn failing_step_skips_rest(backend: &dyn Backend) {
    let fx = Fixture::new("skip");
    let spec = fx
        .spec(backend, "skip")
        .step(Step::new("ok", "echo fine"))
        .step(Step::new("fail", "exit 3"))
        .step(Step::new("never", "echo must-not-run"));
    let (result, log) = run_to_end(backend, &spec).await;
    assert_eq!(result.status, RunStatus::Failed);
    let statuses: Vec<_> = result.steps.iter().map(|s| s.status).collect();
    assert_eq!(
        statuses,
        [StepStatus::Success, StepStatus::Failed, StepStatus::Skipped]
    );
    assert_eq!(result.steps[2].exit_code, None);
    assert!(result.steps[2].started_at.is_none());
    assert!(!log.text().contains("must-not-run"));
    assert!(result.error.as_deref().unwrap_or("").contains("fail"));
    assert_nothing_left(backend, &fx.runner).await;
}

/// Run and step variables and the three standard folders reach every step;
/// a step's own variables override the run's.
pub async fn variables_reach_steps(backend: &dyn Backend) {
    let fx = Fixture::new("env");
    let mut spec = fx
        .spec(backend, "env")
        .env("RUN_VAR", "run")
        .env("BOTH", "run");
    spec = spec.step(
        Step::new(
            "check",
            // Printed and checked here: under `sh -e` a failing test in
            // an `&&` list that is not the last one ends nothing.
            r#"printf 'run=%s both=%s step=%s\n' "$RUN_VAR" "$BOTH" "$STEP_VAR"
               for d in "$WORK_DIR" "$STEPS_DIR" "$OUTPUTS_DIR"; do test -d "$d"; done
               echo vars-ok"#,
        )
        .env("BOTH", "step")
        .env("STEP_VAR", "with space"),
    );
    spec = spec.step(Step::new(
        "scoped",
        "[ -z \"${STEP_VAR:-}\" ] && echo scoped-ok",
    ));
    let (result, log) = run_to_end(backend, &spec).await;
    assert_eq!(result.status, RunStatus::Success, "{}", log.text());
    let text = log.text();
    assert!(
        text.contains("run=run both=step step=with space\nvars-ok"),
        "run variables, a step's override and its own variable: {text}"
    );
    assert!(text.contains("scoped-ok"), "{text}");
    assert_nothing_left(backend, &fx.runner).await;
}

/// Variables named as the runner's own scripts in the environment name
/// theirs (the step's files, its key, the channel's message) reach the
/// step as set, whether the run or the step sets them: what starts a
/// step must not change the variables it hands on, nor take on a step's
/// (an `IFS` that splits a pid).
pub async fn variables_named_like_the_runners_own_reach_steps(backend: &dyn Backend) {
    const NAMES: [&str; 16] = [
        "d", "key", "go", "old", "f", "pid_", "l", "oom", "k", "v", "p0", "n", "c", "s", "u",
        "second",
    ];
    let fx = Fixture::new("env-names");
    let mut spec = fx.spec(backend, "env-names");
    let mut step = Step::new(
        "names",
        // Each name's value, or `-` where it is unset.
        NAMES
            .iter()
            .map(|name| format!("printf '{name}=%s\\n' \"${{{name}--}}\""))
            .collect::<Vec<_>>()
            .join("\n"),
    );
    for (i, name) in NAMES.iter().enumerate() {
        if i % 2 == 0 {
            spec = spec.env(*name, format!("run-{name}"));
        } else {
            step = step.env(*name, format!("step-{name}"));
        }
    }
    spec = spec
        .step(step)
        .step(Step::new("again", "printf 'again d=%s\\n' \"${d--}\""))
        // A separator that splits numbers (a pid, a status) is the step's
        // alone: what waits for the step still reads its status.
        .step(Step::new("ifs", "echo ifs-ran; exit 3").env("IFS", "0123456789"));
    let (result, log) = run_to_end(backend, &spec).await;
    let text = log.text();
    assert_eq!(result.status, RunStatus::Failed, "{text}");
    assert_eq!(result.steps[2].exit_code, Some(3), "{text}");
    assert!(text.contains("\nifs-ran\n"), "{text}");
    for (i, name) in NAMES.iter().enumerate() {
        let side = if i % 2 == 0 { "run" } else { "step" };
        assert!(
            text.contains(&format!("\n{name}={side}-{name}\n")),
            "{name}: {text}"
        );
    }
    assert!(text.contains("\nagain d=run-d\n"), "{text}");
    assert_nothing_left(backend, &fx.runner).await;
}

/// A step cannot settle a later step's result: it makes, in the folder
/// its own script lives in (the runner's state folder on container
/// backends), every file a later step's start could trust under the ids
/// steps had (`a1s1`, `a1s2`): pipes, a status of 0, a pid and a record
/// of output. The later steps still run, with their own exit codes.
pub async fn a_step_cannot_settle_a_later_steps_result(backend: &dyn Backend) {
    let fx = Fixture::new("forged");
    let forge = r#"d=$(dirname "$0")
for id in a1s1 a1s2 a1s1-0000000000000000; do
  f="$d/stepio-$id"
  mkfifo "$f.o" "$f.e" 2>/dev/null || :
  echo 0 > "$f.status"; echo 1 > "$f.pid"; echo forged-output > "$f.out.0"; : > "$f.err.0"
done 2>/dev/null
echo forged"#;
    let spec = fx
        .spec(backend, "forged")
        .step(Step::new("forge", forge))
        .step(Step::new("check", "echo check-ran"))
        .step(Step::new("fail", "echo fail-ran; exit 7"));
    let (result, log) = run_to_end(backend, &spec).await;
    let text = log.text();
    assert!(text.contains("\nforged\n"), "{text}");
    assert!(text.contains("\ncheck-ran\n"), "{text}");
    assert!(text.contains("\nfail-ran\n"), "{text}");
    assert!(!text.contains("forged-output"), "{text}");
    assert_eq!(result.status, RunStatus::Failed, "{text}");
    assert_eq!(result.steps[2].status, StepStatus::Failed, "{text}");
    assert_eq!(result.steps[2].exit_code, Some(7), "{text}");
    assert_nothing_left(backend, &fx.runner).await;
}

/// What a step leaves behind to settle the next step's result once that
/// step has started: it writes `0` into the step's status file in the
/// state folder (its own script's folder) and kills the step's
/// supervisor, before it can write the status it took from the kernel,
/// and every process under it, so that the step's stream ends and the
/// runner reads the file back. Where it finds no step files (a backend
/// without a state folder), it says so and does nothing.
fn settles_the_next_step() -> String {
    format!(
        r#"d=$(dirname "$0"); me=$PPID
( ls "$d"/stepio-*.pid > /dev/null 2>&1 || {{ : > gave-up; exit 0; }}
  while :; do
    for f in "$d"/stepio-*.pid; do
      p=; {{ read -r p _ < "$f"; }} 2>/dev/null
      [ -n "$p" ] && [ "$p" != "$me" ] && break 2
    done
    sleep 0.01
  done
{FORGES_AND_ENDS} ) > /dev/null 2>&1 &
echo left"#
    )
}

/// Shell lines that write `0` into the status file of the step whose pid
/// file is `$f` and kill its supervisor `$p` and every process under it,
/// as a process an earlier step left can.
pub(crate) const FORGES_AND_ENDS: &str = r#"  printf '0 \n' > "${f%.pid}.status"
  k=; for q in /proc/[0-9]*; do
    l=; { read -r l < "$q/stat"; } 2>/dev/null || continue; l=${l##*) }; set -- $l
    [ "$2" = "$p" ] && k="$k ${q#/proc/}"
  done
  kill -9 "$p" $k"#;

/// A process a step leaves cannot settle a later step's result by
/// writing its status file while it runs (`settles_the_next_step`):
/// the later step fails with its own code, or its status is lost (an
/// infrastructure error naming the unsigned status), never a success.
/// Container backends pass it where the step channel's agent runs (x86_64
/// environments), whose supervisors sign the status file.
pub async fn a_left_process_cannot_settle_a_later_steps_status(backend: &dyn Backend) {
    let fx = Fixture::new("settle");
    let wait = "echo failing; i=0; until [ -e gave-up ] || [ $i -ge 3000 ]; do sleep 0.01; i=$((i+1)); done; exit 1";
    let spec = fx
        .spec(backend, "settle")
        .step(Step::new("leave", settles_the_next_step()))
        .step(Step::new("fails", wait));
    let (result, log) = run_to_end(backend, &spec).await;
    let text = log.text();
    assert_eq!(result.steps[0].status, StepStatus::Success, "{text}");
    // The leftover may end the step before its first line is out: that
    // it started is what counts.
    assert!(text.contains("step fails: started"), "{text}");
    let step = &result.steps[1];
    assert_ne!(step.status, StepStatus::Success, "{text}");
    assert_ne!(step.exit_code, Some(0), "{text}");
    if step.status == StepStatus::Error {
        let error = step.error.clone().unwrap_or_default();
        assert!(error.contains("did not write"), "{error}\n{text}");
    }
    assert_nothing_left(backend, &fx.runner).await;
}
