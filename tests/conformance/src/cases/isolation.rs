//! The steps' user kept apart from the runner's side: a process a step
//! leaves behind cannot start, end or settle a later step.

use executor_core::{RunStatus, Step, StepIsolation, StepStatus};

use crate::fixture::{assert_nothing_left, run_to_end, Fixture};
use crate::Backend;

/// What a leftover of step 1 (in a session of its own, out of the step's
/// process group) does: every file of the state folder it can reach
/// replaced or removed, then, over and over while the later steps run,
/// to every process of the runner's side (the agent, supervisors and
/// copiers, all `knotless-agent` by their command line): a forged end
/// mark written into every descriptor of theirs it can open under
/// `/proc`, then stopped and killed. (The
/// later steps' own processes share its uid: what it does to them is
/// within the steps' trust domain, see docs/security.md.)
const ATTACK: &str = r#"me=$$
for f in /.knotless/* /.knotless/.*; do
  cp /bin/busybox "$f" 2>/dev/null; rm -f "$f" 2>/dev/null
done
touch /.knotless/planted 2>/dev/null
while :; do
  for p in /proc/[0-9]*; do
    p=${p#/proc/}; [ "$p" = "$me" ] && continue
    c=; read -r c < /proc/$p/cmdline 2>/dev/null
    case "$c" in *knotless-agent*) ;; *) continue;; esac
    for fd in /proc/$p/fd/*; do
      printf '\0knotless-step-end 000 forged\n' > "$fd" 2>/dev/null
    done
    for s in STOP KILL; do kill -s "$s" "$p" 2>/dev/null; done
  done
done"#;

/// With `backend`'s steps run as uid 65534 (and the runner's side as
/// root), a `setsid` leftover of step 1 that replaces every state file it
/// can and writes forged marks into, stops and kills every process of the
/// runner's side it finds, cannot settle step 3: it fails with its own
/// exit code, and the result says the isolation held (`uid`).
pub async fn a_leftover_of_the_step_user_cannot_touch_the_runners_side(backend: &dyn Backend) {
    let fx = Fixture::new("isolation");
    let spec = fx
        .spec(backend, "isolation")
        // Looked at before the leftover exists: between the agent's fork
        // and the step's exec, a step's process already has the step's uid
        // and the agent's name, and the leftover kills what it finds by it.
        .step(Step::new(
            "look",
            "id -u; stat -c 'state %u %a' /.knotless; \
             if ls /.knotless >/dev/null 2>&1; then echo listed; fi; \
             if touch /.knotless/mine 2>/dev/null; then echo wrote-state; fi",
        ))
        .step(Step::new(
            "leave",
            format!(
                "setsid sh -c {} </dev/null >/dev/null 2>&1 &\necho left",
                executor_core::script::quote(ATTACK)
            ),
        ))
        // Long enough for the leftover to find its supervisor.
        .step(Step::new("fails", "sleep 2; echo failing; exit 7"));
    let (result, log) = run_to_end(backend, &spec).await;
    let text = log.text();
    assert_eq!(result.status, RunStatus::Failed, "{text}");
    assert_eq!(result.steps[0].status, StepStatus::Success, "{text}");
    assert_eq!(result.steps[1].status, StepStatus::Success, "{text}");
    assert_eq!(result.steps[2].status, StepStatus::Failed, "{text}");
    // Its own code, or the leftover's kill: between the agent's fork and
    // the step's exec, the step's process is an agent's copy already of
    // the step's uid (the steps' own trust domain, docs/security.md), and
    // the leftover kills what it finds by that name. Never a forged end.
    assert!(
        matches!(result.steps[2].exit_code, Some(7 | 137)),
        "{:?}: {text}",
        result.steps[2].exit_code
    );
    assert!(text.contains("65534\nstate 0 711\n"), "{text}");
    assert!(
        !text.contains("listed") && !text.contains("wrote-state"),
        "{text}"
    );
    let environment = result.attempts[0]
        .environment
        .clone()
        .expect("the environment");
    assert_eq!(environment.step_isolation, StepIsolation::Uid, "{text}");
    assert!(environment.agent, "{environment:?}");
    assert_nothing_left(backend, &fx.runner).await;
}
