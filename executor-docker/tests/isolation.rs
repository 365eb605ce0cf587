//! With a step user, the runner's side of the container (the channel's
//! agent, each step's supervisor and copier, the state folder) runs as
//! root apart from the steps: a process a step leaves behind, of the
//! step's uid, can neither signal, limit nor write into any of them, nor
//! replace a file they trust, so it cannot start, end or settle a later
//! step.

mod common;

use executor_conformance::fixture::{assert_nothing_left, run_to_end, Fixture};
use executor_core::{RunStatus, Step, StepIsolation, StepStatus};
use executor_docker::DockerOptions;

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

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leftover_of_the_step_user_cannot_touch_the_runners_side() {
    let backend = common::Docker(
        common::executor(DockerOptions {
            user: Some("65534:65534".into()),
            ..common::options()
        })
        .await,
    );
    let fx = Fixture::new("isolation");
    let spec = fx
        .spec(&backend, "isolation")
        .step(Step::new(
            "leave",
            format!(
                "setsid sh -c {} </dev/null >/dev/null 2>&1 &\necho left",
                executor_core::script::quote(ATTACK)
            ),
        ))
        .step(Step::new(
            "look",
            "id -u; stat -c 'state %u %a' /.knotless; \
             if ls /.knotless >/dev/null 2>&1; then echo listed; fi; \
             if touch /.knotless/mine 2>/dev/null; then echo wrote-state; fi",
        ))
        // Long enough for the leftover to find its supervisor.
        .step(Step::new("fails", "sleep 2; echo failing; exit 7"));
    let (result, log) = run_to_end(&backend, &spec).await;
    let text = log.text();
    assert_eq!(result.status, RunStatus::Failed, "{text}");
    assert_eq!(result.steps[1].status, StepStatus::Success, "{text}");
    assert_eq!(result.steps[2].status, StepStatus::Failed, "{text}");
    assert_eq!(result.steps[2].exit_code, Some(7), "{text}");
    assert!(text.contains("65534\nstate 0 711\n"), "{text}");
    assert!(
        !text.contains("listed") && !text.contains("wrote-state"),
        "{text}"
    );
    assert_nothing_left(&backend, &fx.runner).await;
}

/// Without a step user every process shares the image's user: the
/// result says so.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_step_user_the_result_says_one_trust_domain() {
    let backend = common::Docker(common::executor(common::options()).await);
    let fx = Fixture::new("isolation-none");
    let spec = fx
        .spec(&backend, "isolation-none")
        .step(Step::new("one", "true"));
    let (result, log) = run_to_end(&backend, &spec).await;
    assert_eq!(result.status, RunStatus::Success, "{}", log.text());
    let environment = result.attempts[0]
        .environment
        .clone()
        .expect("the environment");
    assert_eq!(environment.step_isolation, StepIsolation::None);
    assert!(environment.agent, "{environment:?}");
    assert_nothing_left(&backend, &fx.runner).await;
}

/// A root step user is no user apart: one trust domain, said in the log.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_root_step_user_is_one_trust_domain_and_the_log_says_so() {
    let backend = common::Docker(
        common::executor(DockerOptions {
            user: Some("0:0".into()),
            ..common::options()
        })
        .await,
    );
    let fx = Fixture::new("isolation-root");
    let spec = fx
        .spec(&backend, "isolation-root")
        .step(Step::new("one", "id -u"));
    let (result, log) = run_to_end(&backend, &spec).await;
    let text = log.text();
    assert_eq!(result.status, RunStatus::Success, "{text}");
    assert!(text.contains("one trust domain"), "{text}");
    let environment = result.attempts[0]
        .environment
        .clone()
        .expect("the environment");
    assert_eq!(environment.step_isolation, StepIsolation::None);
    assert_nothing_left(&backend, &fx.runner).await;
}
