//! Engine outages and cut streams, through a proxy in front of the
//! engine's socket.
//!
//! - When the container's removal passes through it, it stops listening
//!   (connections are refused), cuts every open connection, and listens
//!   again after a while. Calls ride an outage out within
//!   `DockerOptions::reconnect_timeout`; past it, the container goes to
//!   the journal, and the next sweep removes it.
//! - It cuts an exec's attached stream after a number of bytes, as a
//!   network would; the engine then kills the exec's own process. The
//!   step goes on, and is followed.

#[path = "../common/mod.rs"]
mod common;
mod proxy;

use proxy::{Cut, Down, Proxy, RequestCut, Trigger};

use std::sync::Arc;
use std::time::Duration;

use common::Docker;
use executor_conformance::fixture::{assert_nothing_left, Fixture};
use executor_core::journal::Journal;
use executor_core::{run_with, DriverOptions, RunLog, RunStatus, Step};
use executor_docker::{BollardEngine, DockerExecutor, DockerOptions};
use tokio_util::sync::CancellationToken;

async fn executor_through(proxy: &Proxy, options: DockerOptions) -> DockerExecutor {
    let engine = BollardEngine::connect_to(&proxy.host())
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .reconnect_timeout(options.reconnect_timeout);
    DockerExecutor::with_engine(Arc::new(engine), options)
}

/// The engine, reached directly: the probe for leftovers.
async fn direct() -> Docker {
    Docker(common::executor(common::options()).await)
}

fn spec_of(fx: &Fixture, backend: &Docker, name: &str) -> executor_core::RunSpec {
    fx.spec(backend, name)
        .step(Step::new("work", "echo working"))
}

async fn run(
    executor: &DockerExecutor,
    spec: &executor_core::RunSpec,
    options: &DriverOptions,
) -> (executor_core::RunResult, String) {
    let (log, text) = RunLog::memory();
    let result = run_with(executor, spec, &log, CancellationToken::new(), options).await;
    (result, text.text())
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_outage_as_the_container_is_removed_is_ridden_out() {
    let mut proxy = Proxy::start(Some(Duration::from_secs(3))).await;
    let executor = executor_through(&proxy, common::options()).await;
    let probe = direct().await;
    let fx = Fixture::new("engine-outage");
    let spec = spec_of(&fx, &probe, "engine-outage");
    let (result, text) = run(&executor, &spec, &DriverOptions::default()).await;
    assert_eq!(result.status, RunStatus::Success, "{text}");
    proxy.outage_over().await;
    assert_nothing_left(&probe, &fx.runner).await;
}

/// A gateway in front of the engine that answers 502, 503 or 504 while
/// the engine behind it is down is an outage too: each is ridden out.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_answering_5xx_as_the_container_is_removed_is_ridden_out() {
    let probe = direct().await;
    for status in [502, 503, 504] {
        let mut proxy =
            Proxy::start_as(Some(Duration::from_secs(2)), Down::Answering(status)).await;
        let executor = executor_through(&proxy, common::options()).await;
        let fx = Fixture::new("engine-gateway");
        let spec = spec_of(&fx, &probe, "engine-gateway");
        let (result, text) = run(&executor, &spec, &DriverOptions::default()).await;
        proxy.outage_over().await;
        assert_eq!(result.status, RunStatus::Success, "HTTP {status}: {text}");
        assert_nothing_left(&probe, &fx.runner).await;
    }
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_outage_past_the_reconnect_timeout_leaves_the_container_to_the_journal() {
    let mut proxy = Proxy::start(Some(Duration::from_secs(6))).await;
    let options = DockerOptions {
        reconnect_timeout: Duration::from_secs(1),
        ..common::options()
    };
    let executor = executor_through(&proxy, options).await;
    let probe = direct().await;
    let fx = Fixture::new("engine-journal");
    let journal_dir = tempfile::tempdir().unwrap();
    let journal = Journal::new(journal_dir.path());
    let spec = spec_of(&fx, &probe, "engine-journal");
    let driver = DriverOptions {
        journal: Some(journal.clone()),
        ..DriverOptions::default()
    };
    let (result, text) = run(&executor, &spec, &driver).await;
    assert_eq!(result.status, RunStatus::Error, "{text}");
    assert!(text.contains("is in the journal"), "{text}");
    assert_eq!(journal.entries("docker", &fx.runner).unwrap().len(), 1);
    proxy.outage_over().await;
    assert!(
        !probe.0.containers(&fx.runner).await.unwrap().is_empty(),
        "the container outlived the run"
    );
    let swept = journal.sweep(&executor, &fx.runner).await.unwrap();
    assert_eq!(swept.len(), 1);
    assert!(journal.entries("docker", &fx.runner).unwrap().is_empty());
    assert_nothing_left(&probe, &fx.runner).await;
}

/// The executor through a proxy that cuts exec streams, as a conformance
/// backend; leftovers are probed directly.
struct Cutting {
    executor: DockerExecutor,
    probe: Docker,
    proxy: Proxy,
}

impl Cutting {
    /// The executor through `proxy`, made with `options`.
    async fn through(proxy: Proxy, options: DockerOptions) -> Cutting {
        Cutting {
            executor: executor_through(&proxy, options).await,
            probe: direct().await,
            proxy,
        }
    }
}

#[async_trait::async_trait]
impl executor_conformance::Backend for Cutting {
    fn executor(&self) -> &dyn executor_core::Executor {
        &self.executor
    }
    fn image(&self) -> Option<String> {
        Some(common::image())
    }
    async fn leftovers(&self, runner: &str) -> Vec<String> {
        self.probe.leftovers(runner).await
    }
    async fn cut_streams_after(&self, bytes: &[u64]) -> bool {
        self.proxy
            .cuts
            .lock()
            .unwrap()
            .extend(bytes.iter().map(|&at| Cut::At(at)));
        true
    }
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_cut_twice_keeps_every_byte_and_its_code() {
    let backend = Cutting::through(Proxy::start(None).await, common::options()).await;
    executor_conformance::a_step_cut_twice_keeps_every_byte_and_its_code(&backend).await;
}

/// A step that writes 3000 numbered lines to stdout, one to stderr, and
/// exits 7.
const NUMBERED: &str =
    "i=0; while [ $i -lt 3000 ]; do echo \"line $i\"; i=$((i+1)); done; echo done >&2; exit 7";

/// A stream that ends inside a frame's 8-byte header leaves bollard the
/// header's first bytes, which it hands on as a console chunk: they are a
/// cut, followed like any, never the step's output (taken for stdout,
/// three header bytes stood in for three the follow then skipped).
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_inside_a_frames_header_is_followed_with_every_byte() {
    let proxy = Proxy::start(None).await;
    proxy.cuts.lock().unwrap().push_back(Cut::InFrameHeader {
        after: b"line 100\n",
        into: 3,
    });
    let executor = executor_through(&proxy, common::options()).await;
    let probe = direct().await;
    let fx = Fixture::new("frame-cut");
    let spec = fx
        .spec(&probe, "frame-cut")
        .step(Step::new("lines", NUMBERED));
    let (result, text) = run(&executor, &spec, &DriverOptions::default()).await;
    assert!(proxy.cuts.lock().unwrap().is_empty(), "no cut: {text}");
    assert!(text.contains("following it on"), "{text}");
    assert_eq!(result.steps[0].exit_code, Some(7), "{text}");
    // Every byte once and in order. A cut in the middle of a line puts
    // the runner's line on a line of its own, splitting the step's line
    // in two (`lin`, `==> ... following it on ...`, `e 467`): the step's
    // bytes are compared without the line breaks.
    let output: String = text
        .lines()
        .filter(|l| !l.starts_with("==> ") && *l != "done")
        .collect();
    let want: String = (0..3000).map(|i| format!("line {i}")).collect();
    assert!(output == want, "the lines differ: {text}");
    assert!(!text.contains('\u{1}'), "a frame header in the log: {text}");
    assert_nothing_left(&probe, &fx.runner).await;
}

/// Ten runs at once through one executor: three are cancelled mid-step,
/// and the first of their containers' removals takes the engine down for
/// 2 s, cutting every connection, while the others' steps run; they ride
/// it out and follow their steps on.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_runs_from_one_process_ride_out_an_outage_and_a_cancel() {
    let proxy = Proxy::start(Some(Duration::from_secs(2))).await;
    let backend = Docker(executor_through(&proxy, common::options()).await);
    // The cancelled runs' removals set the outage off.
    let logs =
        executor_conformance::many_runs_ride_out_an_outage_and_a_cancel(&backend, async {}).await;
    assert!(
        logs.iter().any(|log| log.contains("waiting up to")),
        "no run met the outage: {logs:#?}"
    );
}

/// A connection cut while the checkout goes in (the upload's body half
/// sent) is a try the engine did not answer: the checkout goes in again,
/// whole. A connection cut while the outputs come back: they come back
/// again, whole, over what the cut try had unpacked.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_in_or_out_cut_partway_goes_again_whole() {
    // The checkout goes in by PUT; the only GET of an archive is the outputs'.
    for (request, up, told) in [
        ("PUT ", true, "no answer while copying the checkout"),
        ("GET ", false, "no answer while copying /outputs out"),
    ] {
        let proxy = Proxy::start(None).await;
        proxy.request_cuts.lock().unwrap().push_back(RequestCut {
            request,
            path: "/archive",
            up,
            after: executor_conformance::COPY_CUT_AT,
        });
        let backend = Cutting::through(proxy, common::options()).await;
        let text = executor_conformance::a_copy_cut_partway_goes_again_whole(&backend).await;
        assert!(
            backend.proxy.request_cuts.lock().unwrap().is_empty(),
            "no cut: {text}"
        );
        assert!(text.contains(told), "{text}");
    }
}

/// A create or a start whose answer is lost: tried again, the create
/// finds the container its first try made (the name is the run's own),
/// the start finds it started; nothing is made twice or left behind.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_and_a_start_whose_answers_are_lost_are_ridden_out() {
    let proxy = Proxy::start(None).await;
    for path in ["/containers/create", "/start"] {
        proxy.request_cuts.lock().unwrap().push_back(RequestCut {
            request: "POST ",
            path,
            up: false,
            after: 0,
        });
    }
    let executor = executor_through(&proxy, common::options()).await;
    let probe = direct().await;
    let fx = Fixture::new("create-cut");
    let spec = spec_of(&fx, &probe, "create-cut");
    let (result, text) = run(&executor, &spec, &DriverOptions::default()).await;
    assert!(
        proxy.request_cuts.lock().unwrap().is_empty(),
        "no cut: {text}"
    );
    assert_eq!(result.status, RunStatus::Success, "{text}");
    assert!(
        text.contains("no answer while creating a container"),
        "{text}"
    );
    assert!(
        text.contains("no answer while starting the container"),
        "{text}"
    );
    assert_nothing_left(&probe, &fx.runner).await;
}

/// The engine goes down at each request of a run in turn, every open
/// connection cut and the request unanswered, or done with its answer
/// lost: whichever it was (a create, an upload, a step's exec or its
/// follow, the outputs, the removal), the run rides it out, every line
/// once, its outputs back, nothing left.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_at_any_request_of_a_run_is_ridden_out() {
    // With a step user, so the root execs that give it the run's folders
    // go through the outages too.
    let options = || DockerOptions {
        user: Some("65534:65534".into()),
        ..common::options()
    };
    let through = |proxy: Proxy| Cutting::through(proxy, options());
    // How many requests a run makes, counted on a proxy whose outage
    // never comes.
    let counting = through(
        Proxy::start_on(
            Some(Duration::from_millis(300)),
            Down::Refusing,
            Trigger::Request(u64::MAX),
        )
        .await,
    )
    .await;
    // Connecting asks the engine its version: with no engine, an executor
    // is not made (a clear error), so the outages come after.
    let connecting = counting.proxy.requests.lock().unwrap().len();
    executor_conformance::a_run_rides_out_an_outage_at_one_request(&counting, "none").await;
    let methods = counting.proxy.requests.lock().unwrap().clone();
    assert!(methods.len() > connecting + 5, "{methods:?}");
    // A read whose answer is lost is one never answered: only a change
    // is also done with its answer lost.
    let triggers = (1..)
        .zip(&methods)
        .skip(connecting)
        .flat_map(|(n, method)| {
            let change = method != "GET";
            [Trigger::Request(n)]
                .into_iter()
                .chain(change.then_some(Trigger::Answer(n)))
        });
    for trigger in triggers {
        let proxy =
            Proxy::start_on(Some(Duration::from_millis(300)), Down::Refusing, trigger).await;
        let backend = through(proxy).await;
        let fault = format!("{trigger:?}");
        executor_conformance::a_run_rides_out_an_outage_at_one_request(&backend, &fault).await;
    }
}
