//! The floor for the Kubernetes per-step benchmark: N bare kube execs of
//! `true` in a running pod, reading each status.
//!
//! `KUBECONFIG=... cargo run --release -p executor-k8s --example bare_kube_exec -- POD N`

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, AttachParams};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let pod = args.next().ok_or("usage: bare_kube_exec POD N")?;
    let n: usize = args.next().ok_or("usage: bare_kube_exec POD N")?.parse()?;
    let client = kube::Client::try_default().await?;
    let pods: Api<Pod> = Api::default_namespaced(client);
    let start = std::time::Instant::now();
    for _ in 0..n {
        let mut attached = pods
            .exec(&pod, ["true"], &AttachParams::default().stderr(true))
            .await?;
        let status = attached.take_status().ok_or("no status channel")?.await;
        if status.and_then(|s| s.status) != Some("Success".into()) {
            return Err("exec failed".into());
        }
    }
    println!("{:.6}", start.elapsed().as_secs_f64());
    Ok(())
}
