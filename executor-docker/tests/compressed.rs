//! Uploads through a link: compressed when the engine's round trip shows
//! a link between machines (or when asked), as they are when not, and
//! whole either way.

mod common;

use std::sync::Arc;
use std::time::Duration;

use executor_conformance::fixture::{assert_nothing_left, run_to_end, Fixture};
use executor_core::tar::Compression;
use executor_core::{RunStatus, Step};
use executor_docker::{BollardEngine, DockerExecutor, DockerOptions};
use knotless_link::{Link, Shape, Upstream};

fn engine_socket() -> String {
    match std::env::var("DOCKER_HOST") {
        Ok(host) if host.starts_with("unix://") => host["unix://".len()..].to_string(),
        _ => "/var/run/docker.sock".to_string(),
    }
}

/// The engine 2 ms away each way (a 4 ms round trip), and an executor
/// reaching it through that link.
async fn through_a_link(compression: Compression) -> (Link, common::Docker) {
    let link = Link::start(
        Upstream::Unix(engine_socket().into()),
        Shape {
            one_way_delay: Duration::from_millis(2),
            bytes_per_second: None,
        },
    )
    .await
    .unwrap();
    let engine = BollardEngine::connect_to(&format!("tcp://{}", link.addr()))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let round_trip = engine.round_trip();
    let options = DockerOptions {
        compression,
        ..common::options()
    };
    let executor = DockerExecutor::with_engine(Arc::new(engine), options).measured(round_trip);
    (link, common::Docker(executor))
}

/// A checkout of 4 MiB of text: what goes up the link is a fraction of
/// it with `Auto` over the link, all of it with `Never`; a step sees it
/// whole both ways.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_compresses_the_checkout_over_a_link_and_never_does_not() {
    let fx = Fixture::new("compressed");
    let line = "fn main() { println!(\"a line of source, as a repository has many\"); }\n";
    std::fs::write(
        fx.checkout().join("src.rs"),
        line.repeat((4 << 20) / line.len()),
    )
    .unwrap();
    let size = std::fs::metadata(fx.checkout().join("src.rs"))
        .unwrap()
        .len();
    let mut sent = Vec::new();
    for compression in [Compression::Auto, Compression::Never] {
        let (link, backend) = through_a_link(compression).await;
        let spec = fx.spec(&backend, "compressed").step(Step::new(
            "check",
            format!("test \"$(wc -c < src.rs)\" -eq {size} && head -c 13 src.rs"),
        ));
        let (result, log) = run_to_end(&backend, &spec).await;
        assert_eq!(result.status, RunStatus::Success, "{}", log.text());
        assert!(log.text().contains("fn main() { p"), "{}", log.text());
        sent.push(link.stats().bytes().0);
        assert_nothing_left(&backend, &fx.runner).await;
    }
    assert!(sent[0] * 4 < size, "auto sent {} of {size}", sent[0]);
    assert!(sent[1] > size, "never sent {} of {size}", sent[1]);
}

async fn always() -> common::Docker {
    common::Docker(
        common::executor(DockerOptions {
            compression: Compression::Always,
            ..common::options()
        })
        .await,
    )
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_the_checkout_and_steps_arrive_intact() {
    let backend = always().await;
    executor_conformance::checkout_arrives_intact(&backend).await;
    executor_conformance::steps_dir_arrives(&backend).await;
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_a_cache_comes_back_warm() {
    executor_conformance::cache_cold_then_warm(&always().await).await;
}

/// The cache limit counts what a compressed cache inflates to: 5000
/// zeros, a few dozen bytes down the wire, are over a 1000-byte limit.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_an_oversized_cache_is_not_saved() {
    executor_conformance::oversized_cache_is_not_saved(&always().await).await;
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_an_unpackable_checkout_fails_by_name() {
    executor_conformance::unpackable_checkout_fails_by_name(&always().await).await;
}

/// Outputs of 4 MiB of text come back down the link a fraction of their
/// size with `Auto`, whole with `Never`, and land the same either way.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_compresses_the_outputs_over_a_link_and_never_does_not() {
    let size: u64 = 4 << 20;
    let mut received = Vec::new();
    for compression in [Compression::Auto, Compression::Never] {
        let fx = Fixture::new("compressedout");
        let (link, backend) = through_a_link(compression).await;
        let spec = fx.spec(&backend, "compressedout").step(Step::new(
            "write",
            format!(
                "yes 'a line of a report, as a test run writes many' | head -c {size} > \"$OUTPUTS_DIR/report.txt\"; \
                 mkdir \"$OUTPUTS_DIR/sub\" && echo small > \"$OUTPUTS_DIR/sub/one\""
            ),
        ));
        let before = link.stats().bytes().1;
        let (result, log) = run_to_end(&backend, &spec).await;
        assert_eq!(result.status, RunStatus::Success, "{}", log.text());
        received.push(link.stats().bytes().1 - before);
        let report = std::fs::read(fx.outputs().join("report.txt")).unwrap();
        assert_eq!(report.len() as u64, size);
        assert!(report.starts_with(b"a line of a report"));
        assert_eq!(
            std::fs::read_to_string(fx.outputs().join("sub/one")).unwrap(),
            "small\n"
        );
        assert_nothing_left(&backend, &fx.runner).await;
    }
    assert!(
        received[0] * 4 < size,
        "auto received {} for {size}",
        received[0]
    );
    assert!(
        received[1] > size,
        "never received {} for {size}",
        received[1]
    );
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_outputs_come_back_and_hostile_ones_are_skipped() {
    let backend = always().await;
    executor_conformance::outputs_come_back(&backend).await;
    executor_conformance::outputs_come_back_after_failure(&backend).await;
    executor_conformance::hostile_outputs_are_skipped_one_by_one(&backend).await;
    executor_conformance::hostile_cache_is_refused(&backend).await;
}

/// The compressor of copies out goes in with the step scripts and runs
/// in an image of busybox alone: what it makes, the image's own `gzip`
/// takes back whole.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[cfg_attr(
    not(knotless_gz),
    ignore = "the compressor was not built for this machine (see the build's warning)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compressor_is_sent_in_and_runs_in_the_image() {
    let backend = always().await;
    let fx = Fixture::new("compressor");
    let gz = format!(
        "{}/{}",
        executor_container::container::STATE_DIR,
        executor_container::container::compressing::GZ_FILE
    );
    let spec = fx.spec(&backend, "compressor").step(Step::new(
        "compress",
        format!("yes 'a line' | head -n 100000 | {gz} | gzip -dc | uniq -c"),
    ));
    let (result, log) = run_to_end(&backend, &spec).await;
    assert_eq!(result.status, RunStatus::Success, "{}", log.text());
    assert!(log.text().contains("100000 a line"), "{}", log.text());
    assert_nothing_left(&backend, &fx.runner).await;
}

/// A local engine stays uncompressed with `Auto`: its Unix socket
/// answers under the threshold. (A cluster on loopback is checked in
/// executor-k8s's `compressed.rs`; a proxy of the test's own on loopback
/// would add its own hop, not show the engine's.)
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_does_not_compress_on_a_unix_socket() {
    let local = common::executor(common::options()).await;
    assert!(!local.compresses().await, "compressed on the Unix socket");
}
