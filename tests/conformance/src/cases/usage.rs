//! What each step cost: CPU time and peak memory, in the result, the
//! `stepFinished` event and the step's end line.

use executor_core::{RunStatus, Step};
use tokio_util::sync::CancellationToken;

use crate::fixture::{assert_nothing_left, assert_valid_result, run_watched, Fixture, WatchedLog};
use crate::Backend;

/// A CPU-bound step reports more CPU time than a sleeping one, and a step
/// whose process holds 60 MB reports a peak above 50 MB while an idle
/// step after it reports one below.
pub async fn each_step_reports_what_it_cost(backend: &dyn Backend) {
    const BIG: u64 = 50_000_000;
    let fx = Fixture::new("usage");
    let spec = fx
        .spec(backend, "usage")
        .step(Step::new(
            "busy",
            "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done",
        ))
        .step(Step::new("idle", "sleep 0.5"))
        // dd holds its 60 MB block while sleep does not read it.
        .step(Step::new(
            "holds",
            "dd if=/dev/zero bs=60000000 count=1 2>/dev/null | sleep 1",
        ))
        .step(Step::new("after", "sleep 0.5"));
    let log = WatchedLog::default();
    let result = run_watched(backend, &spec, &log, CancellationToken::new()).await;
    assert_valid_result(&result);
    assert_eq!(result.status, RunStatus::Success, "{}", result.to_json());
    let usage = |i: usize| {
        result.steps[i].usage.unwrap_or_else(|| {
            panic!(
                "step {} has no usage: {}",
                result.steps[i].name,
                result.to_json()
            )
        })
    };
    let (busy, idle, holds, after) = (usage(0), usage(1), usage(2), usage(3));
    assert!(
        busy.cpu_ms() > idle.cpu_ms() && busy.cpu_ms() >= 50,
        "busy {busy:?}, idle {idle:?}"
    );
    assert!(holds.max_rss_bytes > Some(BIG), "{holds:?}");
    for quiet in [idle, after] {
        assert!(
            quiet.max_rss_bytes.is_some_and(|peak| peak < BIG),
            "{quiet:?}"
        );
    }
    // Where the environment's cgroup can be read, the step that raised
    // its peak says so, and the idle step after it, which did not, says
    // nothing.
    if let Some(peak) = holds.environment_peak_bytes {
        assert!(peak > BIG, "{holds:?}");
        assert_eq!(after.environment_peak_bytes, None, "{after:?}");
    }
    let text = log.text();
    assert!(
        text.lines()
            .any(|l| l.contains("step busy: success (exit 0, ") && l.contains(", cpu ")),
        "{text}"
    );
    assert!(text.contains(", peak "), "{text}");
    let json = result.to_json();
    assert!(
        json.contains("\"cpuUserMs\"") && json.contains("\"maxRssBytes\""),
        "{json}"
    );
    eprintln!("usage: busy {busy:?}, idle {idle:?}, holds {holds:?}, after {after:?}");
    assert_nothing_left(backend, &fx.runner).await;
}
