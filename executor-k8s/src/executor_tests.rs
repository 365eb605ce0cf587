//! The executor's branches over a mocked cluster seam and scripted exec
//! sockets, in milliseconds: what a real cluster shows only under faults.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use executor_core::{CommandOutcome, Executor, ExecutorError, FailureKind, RunLog, RunSpec, Step};
use futures_util::{Sink, Stream};
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_util::sync::CancellationToken;

use super::{K8sExecutor, LiveRun};
use crate::cluster::{ExecConnection, MockCluster};
use crate::K8sOptions;

type Sent = Arc<Mutex<Vec<Vec<u8>>>>;

/// An exec's WebSocket that answers from a script once what it was sent
/// satisfies `until` (stdin fully in, say), and records what it was sent.
struct ScriptedSocket {
    script: VecDeque<Message>,
    sent: Sent,
    until: fn(&[Vec<u8>]) -> bool,
    waker: Option<Waker>,
}

impl Stream for ScriptedSocket {
    type Item = Result<Message, WsError>;
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if !(this.until)(&this.sent.lock().unwrap()) {
            this.waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        Poll::Ready(this.script.pop_front().map(Ok))
    }
}

impl Sink<Message> for ScriptedSocket {
    type Error = WsError;
    fn poll_ready(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Result<(), WsError>> {
        Poll::Ready(Ok(()))
    }
    fn start_send(self: Pin<&mut Self>, msg: Message) -> Result<(), WsError> {
        let this = self.get_mut();
        if let Message::Binary(data) = msg {
            this.sent.lock().unwrap().push(data.to_vec());
        }
        if let Some(waker) = this.waker.take() {
            waker.wake();
        }
        Ok(())
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Result<(), WsError>> {
        Poll::Ready(Ok(()))
    }
    fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Result<(), WsError>> {
        Poll::Ready(Ok(()))
    }
}

fn at_once(_: &[Vec<u8>]) -> bool {
    true
}

/// v5: stdin closed with its CLOSE frame.
fn stdin_closed(sent: &[Vec<u8>]) -> bool {
    sent.iter().any(|f| f.as_slice() == [255, 0])
}

/// v4: the framed stream's last line, `0`, went in after the archive's
/// zero blocks.
fn frames_ended(sent: &[Vec<u8>]) -> bool {
    let stdin: Vec<u8> = sent
        .iter()
        .filter(|f| f.first() == Some(&0))
        .flat_map(|f| f[1..].iter().copied())
        .collect();
    stdin.ends_with(b"\x000\n")
}

fn socket(
    v5: bool,
    script: Vec<Message>,
    until: fn(&[Vec<u8>]) -> bool,
    sent: &Sent,
) -> ExecConnection {
    ExecConnection {
        socket: Box::pin(ScriptedSocket {
            script: script.into(),
            sent: sent.clone(),
            until,
            waker: None,
        }),
        v5,
    }
}

fn status(code: i32) -> Message {
    let body = if code == 0 {
        json!({"status": "Success"})
    } else {
        json!({"status": "Failure", "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]}})
    };
    let mut frame = vec![3u8];
    frame.extend_from_slice(body.to_string().as_bytes());
    Message::binary(frame)
}

fn stdout(text: &str) -> Message {
    let mut frame = vec![1u8];
    frame.extend_from_slice(text.as_bytes());
    Message::binary(frame)
}

fn pod(value: serde_json::Value) -> Pod {
    serde_json::from_value(value).unwrap()
}

fn running() -> Pod {
    pod(
        json!({"metadata": {"name": "p"}, "status": {"phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}]}}),
    )
}

/// An executor with one live run, `job`, whose pod is `p`.
fn live(cluster: MockCluster) -> K8sExecutor {
    let executor = K8sExecutor::with_cluster(Arc::new(cluster), K8sOptions::default());
    executor.live().insert(
        "job".into(),
        LiveRun {
            pod: "p".into(),
            pod_selector: "job-name=job".into(),
            has_secret: false,
            steps: Default::default(),
        },
    );
    executor
}

async fn step(executor: &K8sExecutor) -> Result<CommandOutcome, ExecutorError> {
    let command = executor_core::StepCommand {
        name: "s".into(),
        script: "make".into(),
        env: Vec::new(),
    };
    executor
        .command(
            &executor_core::RunHandle::in_container("job"),
            &command,
            &RunLog::discard(),
            CancellationToken::new(),
        )
        .await
}

#[tokio::test]
async fn exit_137_with_the_pod_oom_killed_is_an_oom_failure() {
    let mut cluster = MockCluster::new();
    let sent = Sent::default();
    let step_socket = socket(
        true,
        vec![stdout("building\n"), status(137)],
        at_once,
        &sent,
    );
    cluster
        .expect_exec()
        .times(1)
        .return_once(move |_, _, _, _| Ok(step_socket));
    cluster.expect_get_pod().times(1).return_once(|_| {
        Ok(Some(pod(json!({"metadata": {"name": "p"}, "status": {"phase": "Running",
            "containerStatuses": [{"name": "step", "image": "i", "imageID": "", "ready": false,
                "restartCount": 0, "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}}))))
    });
    let outcome = step(&live(cluster)).await.unwrap();
    assert!(
        matches!(
            outcome,
            CommandOutcome::OutOfMemory {
                code: Some(137),
                ..
            }
        ),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn exit_137_with_the_pod_deleted_is_a_lost_environment() {
    let mut cluster = MockCluster::new();
    let sent = Sent::default();
    let step_socket = socket(true, vec![status(137)], at_once, &sent);
    cluster
        .expect_exec()
        .times(1)
        .return_once(move |_, _, _, _| Ok(step_socket));
    cluster.expect_get_pod().times(1).return_once(|_| Ok(None));
    let err = step(&live(cluster)).await.unwrap_err();
    assert!(matches!(err, ExecutorError::EnvironmentLost(_)), "{err}");
    assert!(err.retryable());
}

#[tokio::test]
async fn a_status_that_never_came_from_a_pod_that_answers_is_lost_never_success() {
    let mut cluster = MockCluster::new();
    let sent = Sent::default();
    let calls = Arc::new(AtomicUsize::new(0));
    let (step_sent, probe_sent) = (sent.clone(), sent.clone());
    cluster
        .expect_exec()
        .times(2)
        .returning(move |_, _, argv, _| {
            if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                // The step's output, then the connection drops: no status.
                Ok(socket(true, vec![stdout("half")], at_once, &step_sent))
            } else {
                assert_eq!(argv, ["true"], "the probe");
                Ok(socket(true, vec![status(0)], at_once, &probe_sent))
            }
        });
    cluster
        .expect_get_pod()
        .times(1)
        .return_once(|_| Ok(Some(running())));
    let err = step(&live(cluster)).await.unwrap_err();
    assert!(matches!(err, ExecutorError::LostExitStatus { .. }), "{err}");
    assert_eq!(err.kind(), FailureKind::Unreachable);
}

#[tokio::test]
async fn on_v4_the_checkout_goes_in_frames_once_the_protocol_is_known() {
    let mut cluster = MockCluster::new();
    let sent = Sent::default();
    let argvs = Arc::new(Mutex::new(Vec::<Vec<String>>::new()));
    let (seen, frames) = (argvs.clone(), sent.clone());
    cluster.expect_exec().returning(move |_, _, argv, stdin| {
        if !stdin {
            // The folder is made first.
            assert_eq!(argv[0], "mkdir");
            return Ok(socket(false, vec![status(0)], at_once, &Sent::default()));
        }
        seen.lock().unwrap().push(argv.to_vec());
        // The first, plain `tar x`, learns that the server speaks v4 and
        // is dropped unsent; every copy after goes framed.
        Ok(socket(false, vec![status(0)], frames_ended, &frames))
    });
    let executor = live(cluster);
    let checkout = tempfile::tempdir().unwrap();
    std::fs::write(checkout.path().join("f"), "x".repeat(100_000)).unwrap();
    let run = executor_core::RunHandle::in_container("job");
    executor
        .copy_in(&run, checkout.path(), "/cache")
        .await
        .unwrap();
    executor
        .copy_in(&run, checkout.path(), "/cache")
        .await
        .unwrap();
    let argvs = argvs.lock().unwrap().clone();
    let framed: Vec<_> = argvs
        .iter()
        .filter(|a| a[0] == "sh" && a[2] == crate::framed::UNFRAME)
        .collect();
    let plain: Vec<_> = argvs.iter().filter(|a| a[0] == "tar").collect();
    assert_eq!((plain.len(), framed.len()), (1, 2), "{argvs:?}");
    assert!(
        !sent.lock().unwrap().iter().any(|f| f.first() == Some(&255)),
        "v4 has no CLOSE"
    );
}

#[tokio::test]
async fn on_v5_stdin_is_closed_and_tar_runs_once() {
    let mut cluster = MockCluster::new();
    let sent = Sent::default();
    let frames = sent.clone();
    cluster.expect_exec().returning(move |_, _, argv, stdin| {
        let until = if stdin { stdin_closed } else { at_once };
        assert!(!stdin || argv[0] == "tar", "{argv:?}");
        Ok(socket(true, vec![status(0)], until, &frames))
    });
    let executor = live(cluster);
    let checkout = tempfile::tempdir().unwrap();
    std::fs::write(checkout.path().join("f"), "data").unwrap();
    let run = executor_core::RunHandle::in_container("job");
    executor
        .copy_in(&run, checkout.path(), "/cache")
        .await
        .unwrap();
    assert!(sent
        .lock()
        .unwrap()
        .iter()
        .any(|f| f.as_slice() == [255, 0]));
}

#[tokio::test]
async fn a_job_whose_pod_cannot_start_is_torn_down_before_start_returns() {
    let mut cluster = MockCluster::new();
    cluster.expect_namespace().return_const("ns".to_string());
    cluster.expect_tls_unverified().return_const(false);
    cluster.expect_access_review().returning(|_| Ok(true));
    cluster
        .expect_create_job()
        .times(1)
        .returning(|job| Ok(job.clone()));
    let lists = AtomicUsize::new(0);
    cluster.expect_list_pods().returning(move |_| {
        if lists.fetch_add(1, Ordering::SeqCst) == 0 {
            let waiting = pod(
                json!({"metadata": {"name": "p"}, "status": {"phase": "Pending",
                "containerStatuses": [{"name": "step", "image": "i", "imageID": "", "ready": false,
                    "restartCount": 0, "state": {"waiting": {"reason": "ErrImagePull",
                        "message": "manifest unknown"}}}]}}),
            );
            Ok((vec![waiting], "1".into()))
        } else {
            // After the delete: the pod is gone.
            Ok((Vec::new(), "2".into()))
        }
    });
    cluster.expect_pod_events().returning(|_| Ok(Vec::new()));
    cluster.expect_delete_job().times(1).returning(|_| Ok(()));
    let executor = K8sExecutor::with_cluster(Arc::new(cluster), K8sOptions::default());
    let checkout = tempfile::tempdir().unwrap();
    let mut spec = RunSpec::new(
        "half",
        "did:plc:half",
        checkout.path(),
        checkout.path().join("out"),
    )
    .step(Step::new("s", "true"));
    spec.image = Some("registry.invalid/missing".into());
    let err = executor
        .start(&spec, &RunLog::discard(), CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), FailureKind::Image, "{err}");
    assert!(!err.retryable(), "a missing image will not appear: {err}");
    assert!(executor.live().is_empty());
}
