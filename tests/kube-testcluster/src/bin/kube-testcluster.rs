//! Runs a test cluster until Ctrl-C, for benchmarks and for poking at it
//! with kubectl: `KUBECONFIG=$(kube-testcluster --print-kubeconfig-path)`.
//!
//! Flags: `--v4-only`, `--token`. Prints the kubeconfig path on the first
//! line of stdout once the cluster serves.

use kube_testcluster::{AuthMode, ClusterOptions, TestCluster};

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let options = ClusterOptions {
        v4_only: args.iter().any(|a| a == "--v4-only"),
        auth: if args.iter().any(|a| a == "--token") {
            AuthMode::Token
        } else {
            AuthMode::ClientCertificate
        },
        ..ClusterOptions::default()
    };
    let cluster = match TestCluster::start(options).await {
        Ok(c) => c,
        Err(err) => {
            eprintln!("kube-testcluster: {err}");
            std::process::exit(1);
        }
    };
    println!("{}", cluster.kubeconfig().display());
    eprintln!(
        "kube-testcluster: serving {}; Ctrl-C stops it",
        cluster.url()
    );
    let _ = tokio::signal::ctrl_c().await;
    cluster.shutdown().await;
}
