//! The test cluster through kube-rs, from the kubeconfig it writes.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, AttachParams, DeleteParams, ListParams, PostParams, PropagationPolicy};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, Config};
use kube_testcluster::{AuthMode, ClusterOptions, ImagePullFault, Protocol, TestCluster};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod basics;
mod faults;

fn image() -> String {
    std::env::var("KNOTLESS_TEST_IMAGE").unwrap_or_else(|_| "knotless-busybox:local".into())
}

async fn client(cluster: &TestCluster) -> Client {
    let kubeconfig = Kubeconfig::read_from(cluster.kubeconfig()).unwrap();
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

fn job(name: &str, image: &str) -> Job {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "labels": {"app": "kube-client-proof"}},
        "spec": {"backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": image, "command": ["sh", "-c", "while :; do sleep 3600; done"]}],
        }}},
    }))
    .unwrap()
}

/// The Job's pod, once the controller has made it: as on a real cluster
/// it comes after the Job, so it is waited for on a watch.
async fn pod_of(pods: &Api<Pod>, job: &str) -> String {
    use futures_util::StreamExt;
    use kube::api::{WatchEvent, WatchParams};
    let selector = format!("job-name={job}");
    let made = async {
        loop {
            let list = pods
                .list(&ListParams::default().labels(&selector))
                .await
                .unwrap();
            if let Some(pod) = list.items.first() {
                return pod.metadata.name.clone().unwrap();
            }
            let rv = list.metadata.resource_version.unwrap_or_default();
            let mut events = pods
                .watch(&WatchParams::default().labels(&selector), &rv)
                .await
                .unwrap()
                .boxed();
            while let Some(event) = events.next().await {
                if let Ok(WatchEvent::Added(pod)) = event {
                    return pod.metadata.name.unwrap();
                }
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), made)
        .await
        .expect("the Job's pod was never made")
}

async fn ready(pods: &Api<Pod>, name: &str) {
    let ready = await_condition(pods.clone(), name, conditions::is_pod_running());
    tokio::time::timeout(Duration::from_secs(60), ready)
        .await
        .expect("pod never ran")
        .unwrap();
}
