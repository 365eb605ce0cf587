//! Copies into the pod through a link: compressed when the API server's
//! round trip shows a link between machines (or when asked), as they are
//! when not, and whole either way, on v5 and on v4 servers.

mod common;

use std::time::Duration;

use executor_conformance::fixture::{assert_nothing_left, run_to_end, Fixture};
use executor_conformance::Backend;
use executor_core::tar::Compression;
use executor_core::{Executor, RunStatus, Step};
use executor_k8s::{K8sExecutor, K8sOptions, KubeconfigSource};
use knotless_link::{Link, Shape, Upstream};
use kube_testcluster::{ClusterOptions, TestCluster};

/// An executor that reaches the test cluster through a link.
struct Linked {
    executor: K8sExecutor,
    cluster: TestCluster,
    link: Link,
    _dir: tempfile::TempDir,
}

#[async_trait::async_trait]
impl Backend for Linked {
    fn executor(&self) -> &dyn Executor {
        &self.executor
    }
    fn image(&self) -> Option<String> {
        Some(common::image())
    }
    async fn leftovers(&self, runner: &str) -> Vec<String> {
        let mut found = self
            .executor
            .leftovers(runner)
            .await
            .unwrap_or_else(|e| vec![format!("cannot list: {e}")]);
        found.extend(self.cluster.everything());
        found
    }
}

/// The test cluster 2 ms away each way (a 4 ms round trip).
async fn through_a_link(cluster: ClusterOptions, compression: Compression) -> Linked {
    let cluster = TestCluster::start(cluster).await.unwrap();
    let server = cluster.url().trim_start_matches("https://").to_string();
    let link = Link::start(
        Upstream::Tcp(server.clone()),
        Shape {
            one_way_delay: Duration::from_millis(2),
            bytes_per_second: None,
        },
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let text = std::fs::read_to_string(cluster.kubeconfig()).unwrap();
    std::fs::write(&kubeconfig, text.replace(&server, &link.addr().to_string())).unwrap();
    let source = KubeconfigSource {
        kubeconfig: Some(kubeconfig),
        ..KubeconfigSource::default()
    };
    let options = K8sOptions {
        compression,
        ..common::options()
    };
    let executor = K8sExecutor::connect(&source, options)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    Linked {
        executor,
        cluster,
        link,
        _dir: dir,
    }
}

/// A checkout of 4 MiB of text, and the same back as an output: what
/// goes up and comes down the link is a fraction of it with `Auto` over
/// the link, all of it with `Never`; a step sees the checkout whole and
/// the output comes back whole both ways, on a v5 server and a v4-only
/// one.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_compresses_the_checkout_over_a_link_and_never_does_not() {
    let fx = Fixture::new("k8s-compressed");
    let line = "fn main() { println!(\"a line of source, as a repository has many\"); }\n";
    std::fs::write(
        fx.checkout().join("src.rs"),
        line.repeat((4 << 20) / line.len()),
    )
    .unwrap();
    let size = std::fs::metadata(fx.checkout().join("src.rs"))
        .unwrap()
        .len();
    for v4_only in [false, true] {
        let mut sent = Vec::new();
        for compression in [Compression::Auto, Compression::Never] {
            let cluster = ClusterOptions {
                v4_only,
                ..ClusterOptions::default()
            };
            let backend = through_a_link(cluster, compression).await;
            let spec = fx.spec(&backend, "k8s-compressed").step(Step::new(
                "check",
                format!(
                    "test \"$(wc -c < src.rs)\" -eq {size} && head -c 13 src.rs && cp src.rs \"$OUTPUTS_DIR/back.rs\""
                ),
            ));
            let (result, log) = run_to_end(&backend, &spec).await;
            assert_eq!(
                result.status,
                RunStatus::Success,
                "v4 only {v4_only}: {}",
                log.text()
            );
            assert!(log.text().contains("fn main() { p"), "{}", log.text());
            assert_eq!(
                std::fs::read(fx.outputs().join("back.rs")).unwrap(),
                std::fs::read(fx.checkout().join("src.rs")).unwrap()
            );
            std::fs::remove_file(fx.outputs().join("back.rs")).unwrap();
            sent.push(backend.link.stats().bytes());
            assert_nothing_left(&backend, &fx.runner).await;
            backend.cluster.shutdown().await;
        }
        let (auto, never) = (sent[0], sent[1]);
        assert!(
            auto.0 * 4 < size && auto.1 * 4 < size,
            "v4 only {v4_only}: auto sent {} and got {} of {size}",
            auto.0,
            auto.1
        );
        assert!(
            never.0 > size && never.1 > size,
            "v4 only {v4_only}: never sent {} and got {} of {size}",
            never.0,
            never.1
        );
    }
}

/// A cluster on loopback stays uncompressed with `Auto`: its API server
/// answers under the threshold.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_does_not_compress_on_loopback() {
    let local = common::K8s::start(ClusterOptions::default(), common::options()).await;
    assert!(!local.executor.compresses().await, "compressed on loopback");
    local.cluster.shutdown().await;
}
