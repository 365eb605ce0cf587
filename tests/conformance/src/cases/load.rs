//! Many runs at once through one executor, as a runner daemon drives
//! them from one process: load does not become loss.

use std::future::Future;

use executor_core::expr::Template;
use executor_core::{RunStatus, Step, StepStatus};
use tokio_util::sync::CancellationToken;

use crate::fixture::{assert_nothing_left, run_to_end, run_watched, Fixture, WatchedLog};
use crate::Backend;

/// How many runs the case drives at once, and how many of them it
/// cancels mid-step.
const RUNS: usize = 10;
const CANCELLED: usize = 3;
/// What one more run's step prints while the others wait: 32 MiB of
/// lines, as fast as the environment can write them.
const FLOOD: u64 = 32 << 20;

/// Ten runs at once through one executor (one client and its pool of
/// connections): three are cancelled in their second step and `outage`
/// happens (the backend's own: an API server down, an
/// engine that refuses connections; a backend whose outage the
/// cancelled runs' removals set off passes a future that does nothing).
/// One more run floods its output meanwhile. The cancelled runs end
/// `cancelled`; every other run succeeds with each of its lines once, the
/// flooding one with every byte; nothing of any is left. Returns the runs' logs, for
/// the caller to see the outage was met.
pub async fn many_runs_ride_out_an_outage_and_a_cancel<F>(
    backend: &dyn Backend,
    outage: F,
) -> Vec<String>
where
    F: Future<Output = ()>,
{
    let first = Fixture::new("many");
    let fixtures: Vec<Fixture> = (0..RUNS)
        .map(|i| {
            let mut fx = Fixture::new(&format!("many{i}"));
            fx.runner.clone_from(&first.runner);
            fx
        })
        .collect();
    let mut specs: Vec<_> = fixtures
        .iter()
        .enumerate()
        .map(|(i, fx)| {
            fx.spec(backend, &format!("many-{i}"))
                .step(Step::new("hello", format!("echo run-{i}-started")))
                .step(Step::new(
                    "work",
                    // A run to be cancelled waits longer than the case
                    // can take, so however late its cancel comes, it
                    // comes mid-step.
                    format!(
                        "echo run-{i}-waiting; sleep {}; echo run-{i}-after",
                        if i < CANCELLED { 600 } else { 4 }
                    ),
                ))
        })
        .collect();
    let mut flooding = Fixture::new("manyflood");
    flooding.runner.clone_from(&first.runner);
    specs.push(flooding.spec(backend, "many-flood").step(Step::new(
        "flood",
        format!("echo run-{RUNS}-waiting; yes 0123456789abcdefghijklmnopqrstu | head -c {FLOOD}"),
    )));
    let logs: Vec<WatchedLog> = specs.iter().map(|_| WatchedLog::default()).collect();
    let cancels: Vec<CancellationToken> = specs.iter().map(|_| CancellationToken::new()).collect();
    let runs = futures_util::future::join_all(
        specs
            .iter()
            .zip(&logs)
            .zip(&cancels)
            .map(|((spec, log), cancel)| run_watched(backend, spec, log, cancel.clone())),
    );
    // Each cancel as soon as its run's step runs, and the outage right
    // after, while the other runs start or run their steps: waiting for
    // every run first would let the quick ones finish before it.
    let control = async {
        for (i, (log, cancel)) in logs.iter().zip(&cancels).take(CANCELLED).enumerate() {
            log.wait_for(&format!("run-{i}-waiting")).await;
            cancel.cancel();
        }
        outage.await;
    };
    let (results, ()) = tokio::join!(runs, control);
    for (i, (result, log)) in results.iter().zip(&logs).enumerate() {
        let text = log.text();
        if i == RUNS {
            // The flood itself would bury the runner's own lines.
            let runner_lines: String = text
                .lines()
                .filter(|l| !l.starts_with("0123456789"))
                .map(|l| format!("{l}\n"))
                .collect();
            assert_eq!(
                result.status,
                RunStatus::Success,
                "the flooding run ({:?}): {runner_lines}",
                result.error
            );
            assert!(
                log.total() >= FLOOD,
                "the flooding run's log holds {} bytes",
                log.total()
            );
            continue;
        }
        if i < CANCELLED {
            assert_eq!(result.status, RunStatus::Cancelled, "run {i}: {text}");
            assert_eq!(
                result.steps[1].status,
                StepStatus::Cancelled,
                "run {i}: {text}"
            );
            continue;
        }
        assert_eq!(result.status, RunStatus::Success, "run {i}: {text}");
        for line in ["started", "waiting", "after"] {
            let line = format!("run-{i}-{line}\n");
            assert_eq!(text.matches(&line).count(), 1, "run {i}, {line:?}: {text}");
        }
    }
    assert_nothing_left(backend, &first.runner).await;
    logs.iter().map(WatchedLog::text).collect()
}

/// A run of a service and two steps that reach it, pass an output on and
/// fill `OUTPUTS_DIR`:
/// for a caller that has arranged for the engine or API server to go down
/// at one of its requests (`fault` says which, for the failures). It
/// rides the outage out: it succeeds, every line once, its outputs back,
/// nothing left. Returns the run's log.
pub async fn a_run_rides_out_an_outage_at_one_request(
    backend: &dyn Backend,
    fault: &str,
) -> String {
    let fx = Fixture::new("any-request");
    let spec = fx
        .spec(backend, "any-request")
        .service(
            executor_core::Service::new("web", backend.image().unwrap_or_default())
                .command("mkdir -p /tmp/srv; echo served > /tmp/srv/index.html; exec httpd -f -p 8080 -h /tmp/srv")
                .ready(executor_core::Readiness::Tcp(8080)),
        )
        .step(
            Step::new(
                "one",
                "echo line-one; printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc web 8080 | tail -1; \
                 echo word=kept >> \"$STEP_OUTPUT\"",
            )
            .id("one"),
        )
        .step(
            Step::new(
                "two",
                "echo line-two; echo \"$WORD\" > \"$OUTPUTS_DIR/kept.txt\"",
            )
            .input(
                "WORD",
                Template::parse("${{ steps.one.outputs.word }}").unwrap_or_else(|e| panic!("{e}")),
            ),
        );
    let (result, log) = run_to_end(backend, &spec).await;
    let text = log.text();
    assert_eq!(
        result.status,
        RunStatus::Success,
        "outage at {fault}: {text}"
    );
    for line in ["line-one\n", "served\n", "line-two\n"] {
        assert_eq!(
            text.matches(line).count(),
            1,
            "outage at {fault}, {line:?}: {text}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(fx.outputs().join("kept.txt"))
            .ok()
            .as_deref(),
        Some("kept\n"),
        "outage at {fault}: {text}"
    );
    assert_nothing_left(backend, &fx.runner).await;
    text
}
