//! Many runs at once from one process, through the library, as a runner
//! daemon drives them: one executor (one engine or cluster client, its
//! connection pool shared) and, per run, its own spec, log, events,
//! cancellation and result. Prints one summary line.
//!
//! ```sh
//! eval "$(scripts/prepare-engine.sh)"
//! cargo run --release -p runner-cli --example many_runs -- docker 50 10 1048576
//! KUBECONFIG=... cargo run --release -p runner-cli --example many_runs -- k8s 50 10 1048576
//! ```
//!
//! Arguments: the backend (`docker` or `k8s`), the runs, the steps of
//! each, and the bytes each step prints; `KNOTLESS_WORKERS` sets the
//! runtime's worker threads (default 2), `KNOTLESS_TEST_IMAGE` the image,
//! and `KNOTLESS_FLOOD` makes the first run flood: each of its steps
//! prints that many bytes instead, and the summary's per-step figures are
//! the other runs' (what a flood does to its neighbours).
//! Each run's log, events and result are written to a temporary folder,
//! and every log is checked to hold each step's bytes exactly once.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use executor_core::events::JsonLines;
use executor_core::{run, Executor, RunLog, RunSpec, RunStatus, Step};
use tokio_util::sync::CancellationToken;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [backend, runs, steps, bytes] = args.as_slice() else {
        bail!("usage: many_runs docker|k8s RUNS STEPS BYTES");
    };
    let number = |text: &str, what: &str| -> anyhow::Result<usize> {
        text.parse()
            .with_context(|| format!("{what} {text:?} is not a number"))
    };
    let (runs, steps, bytes) = (
        number(runs, "RUNS")?,
        number(steps, "STEPS")?,
        number(bytes, "BYTES")?,
    );
    let workers = std::env::var("KNOTLESS_WORKERS")
        .ok()
        .and_then(|w| w.parse().ok())
        .unwrap_or(2);
    // Many runs are many streams at once: a multi-threaded runtime.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()?;
    let flood = std::env::var("KNOTLESS_FLOOD")
        .ok()
        .map(|f| number(&f, "KNOTLESS_FLOOD"))
        .transpose()?;
    let summary = runtime.block_on(drive(backend, runs, steps, bytes, flood))?;
    println!("{summary} workers={workers}");
    Ok(())
}

/// One executor for every run: its client, and the pool of connections
/// behind it, are shared.
async fn executor_of(backend: &str) -> anyhow::Result<Arc<dyn Executor>> {
    Ok(match backend {
        "docker" => Arc::new(
            executor_docker::DockerExecutor::connect(executor_docker::DockerOptions {
                pull: executor_docker::PullPolicy::Never,
                network: Some("none".into()),
                ..Default::default()
            })
            .await?,
        ),
        "k8s" => Arc::new(
            executor_k8s::K8sExecutor::connect(
                &executor_k8s::KubeconfigSource::default(),
                executor_k8s::K8sOptions::default(),
            )
            .await?,
        ),
        other => bail!("{other:?} is neither docker nor k8s"),
    })
}

async fn drive(
    backend: &str,
    runs: usize,
    steps: usize,
    bytes: usize,
    flood: Option<usize>,
) -> anyhow::Result<String> {
    let executor = executor_of(backend).await?;
    let image =
        std::env::var("KNOTLESS_TEST_IMAGE").unwrap_or_else(|_| "knotless-busybox:local".into());
    let dir = tempfile::tempdir()?;
    let checkout = dir.path().join("checkout");
    std::fs::create_dir(&checkout)?;
    let began = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..runs {
        let executor = Arc::clone(&executor);
        let mut spec = RunSpec::new(
            format!("many-{i}"),
            "did:plc:many-runs",
            &checkout,
            dir.path().join(format!("out-{i}")),
        )
        .image(image.clone());
        let printed = match flood {
            Some(flood) if i == 0 => flood,
            _ => bytes,
        };
        for s in 0..steps {
            // `printed` bytes of `a` and a newline: the log must hold each once.
            let script = format!("head -c {printed} /dev/zero | tr '\\0' a; echo");
            spec = spec.step(Step::new(format!("print-{s}"), script));
        }
        let folder = dir.path().to_path_buf();
        tasks.push(tokio::spawn(async move {
            one_run(executor.as_ref(), &spec, &folder, i).await
        }));
    }
    let mut step_ms = Vec::new();
    let mut succeeded = 0;
    for (i, task) in tasks.into_iter().enumerate() {
        let (status, durations, whole) = task.await??;
        // The flood passes the log's limit (64 MiB): past it bytes are
        // dropped by design, so the flooding run is judged by its status.
        let flooding = flood.is_some() && i == 0;
        succeeded += usize::from(status == RunStatus::Success && (flooding || whole(steps, bytes)));
        if !flooding {
            step_ms.extend(durations);
        }
    }
    let wall = began.elapsed();
    step_ms.sort_unstable();
    let at = |q: f64| {
        let i = ((step_ms.len() as f64 - 1.0) * q).round() as usize;
        step_ms.get(i).copied().unwrap_or(0)
    };
    Ok(format!(
        "runs={runs} succeeded={succeeded} wall={:.2}s peak_rss={}MiB step_p50={}ms step_p99={}ms",
        wall.as_secs_f64(),
        peak_rss_kib() / 1024,
        at(0.5),
        at(0.99),
    ))
}

/// Whether a run's log holds `steps` lines of `bytes` step bytes each,
/// every one once.
type Whole = Box<dyn Fn(usize, usize) -> bool + Send>;

/// Run `i`: its own log, events and result in `folder`. Its status, each
/// step's milliseconds, and the check of its log.
async fn one_run(
    executor: &dyn Executor,
    spec: &RunSpec,
    folder: &Path,
    i: usize,
) -> anyhow::Result<(RunStatus, Vec<u64>, Whole)> {
    let log_path = folder.join(format!("run-{i}.log"));
    let log = RunLog::create(&log_path)?;
    log.add_sink(Arc::new(JsonLines::create(
        &folder.join(format!("events-{i}.jsonl")),
    )?));
    let result = run(executor, spec, &log, CancellationToken::new()).await;
    if !log.flush(Duration::from_secs(30)).await {
        bail!("run {i}: its log took nothing for 30s");
    }
    result.write_to(&folder.join(format!("result-{i}.json")))?;
    let durations = result.steps.iter().map(|s| s.duration_ms).collect();
    let whole: Whole = Box::new(move |steps, bytes| {
        std::fs::read(&log_path).is_ok_and(|text| {
            let printed = text
                .split(|&b| b == b'\n')
                .filter(|line| line.len() == bytes && line.iter().all(|&b| b == b'a'))
                .count();
            printed == steps
        })
    });
    Ok((result.status, durations, whole))
}

/// This process's peak resident memory (`VmHWM`), in KiB.
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}
