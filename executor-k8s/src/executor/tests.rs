//! The executor's branches over a mocked cluster seam and scripted exec
//! sessions, in milliseconds: what a real cluster shows only under faults.
//! (The wire protocols under a session are tested in `exec.rs`.)

use executor_container::detached::{end_key, end_mark, BEGIN_MARK};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use executor_core::{
    CommandOutcome, Executor, ExecutorError, FailureKind, RunHandle, RunLog, RunSpec, Step,
    StepCommand,
};
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use super::{K8sExecutor, LiveRun, PodVariables};
use crate::cluster::{Ended, ExecIo, ExecSession, MockCluster};
use crate::K8sOptions;

/// What a scripted exec was given on stdin.
type Stdin = Arc<Mutex<Vec<u8>>>;

/// An exec that reads all of its stdin, writes its stdout and ends as
/// scripted.
struct ScriptedExec {
    v5: bool,
    stdout: &'static str,
    ended: Ended,
    stdin: Stdin,
    /// The key of its end marks, for a step's start or follow: it begins
    /// both streams with the begin mark and, when it exits, ends them with
    /// the end mark, as the wrapper does.
    marked: Option<String>,
}

#[async_trait]
impl ExecSession for ScriptedExec {
    fn closes_stdin(&self) -> bool {
        self.v5
    }
    async fn finish(
        self: Box<Self>,
        io: ExecIo<'_>,
        _: &CancellationToken,
    ) -> Result<Ended, ExecutorError> {
        if let Some(stdin) = io.stdin {
            let mut all = Vec::new();
            stdin.read_to_end(&mut all).await.unwrap();
            self.stdin.lock().unwrap().extend(all);
        }
        if self.marked.is_some() {
            io.stdout.write_all(BEGIN_MARK).await.unwrap();
            io.stderr.write_all(BEGIN_MARK).await.unwrap();
        }
        io.stdout.write_all(self.stdout.as_bytes()).await.unwrap();
        // The wrapper's mark carries the status it exits with; a stream
        // cut short has none.
        if let (Some(key), Ended::Exited(code)) = (&self.marked, &self.ended) {
            let status = u8::try_from(*code).unwrap_or(u8::MAX);
            io.stdout.write_all(&end_mark(key, status)).await.unwrap();
            io.stderr.write_all(&end_mark(key, status)).await.unwrap();
        }
        Ok(self.ended)
    }
}

/// An exec on a v5 cluster that prints `stdout` and ends as `ended`.
fn exec(stdout: &'static str, ended: Ended) -> Box<dyn ExecSession> {
    scripted(true, stdout, ended, &Stdin::default())
}

/// As [`exec`], for a step's start or follow, `argv`.
fn step_exec(argv: &[String], stdout: &'static str, ended: Ended) -> Box<dyn ExecSession> {
    Box::new(ScriptedExec {
        v5: true,
        stdout,
        ended,
        stdin: Stdin::default(),
        marked: Some(end_key(argv).unwrap_or_default().to_string()),
    })
}

fn scripted(v5: bool, stdout: &'static str, ended: Ended, stdin: &Stdin) -> Box<dyn ExecSession> {
    Box::new(ScriptedExec {
        v5,
        stdout,
        ended,
        stdin: stdin.clone(),
        marked: None,
    })
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

/// An executor with one live run, `job`, whose pod is `p`, started from `spec`.
fn live_from(cluster: MockCluster, spec: &RunSpec) -> K8sExecutor {
    let executor = K8sExecutor::with_cluster(Arc::new(cluster), K8sOptions::default());
    executor.live().insert(
        "job".into(),
        LiveRun {
            pod: "p".into(),
            pod_selector: "job-name=job".into(),
            has_secret: false,
            variables: PodVariables::of(spec, &RunHandle::in_container("job")),
            scripts: Default::default(),
            services: Vec::new(),
            log: None,
        },
    );
    executor
}

/// An executor with one live run, `job`, of one step `s` and no variables.
fn live(cluster: MockCluster) -> K8sExecutor {
    live_from(
        cluster,
        &RunSpec::new("r", "did:plc:r", ".", "out").step(Step::new("s", "make")),
    )
}

async fn run_step(
    executor: &K8sExecutor,
    env: Vec<(String, String)>,
) -> Result<CommandOutcome, ExecutorError> {
    let command = StepCommand {
        id: executor_core::labels::random_hex(8),
        follow_from: None,
        upcoming: Vec::new(),
        name: "s".into(),
        script: "make".into(),
        env,
    };
    executor
        .command(
            &RunHandle::in_container("job"),
            &command,
            &RunLog::discard(),
            CancellationToken::new(),
        )
        .await
}

async fn step(executor: &K8sExecutor) -> Result<CommandOutcome, ExecutorError> {
    run_step(executor, Vec::new()).await
}

#[tokio::test]
async fn exit_137_with_the_pod_oom_killed_is_an_oom_failure() {
    let mut cluster = MockCluster::new();
    cluster
        .expect_exec()
        .times(1)
        .return_once(|_, _, argv, _| Ok(step_exec(argv, "building\n", Ended::Exited(137))));
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
    cluster
        .expect_exec()
        .times(1)
        .return_once(|_, _, argv, _| Ok(step_exec(argv, "", Ended::Exited(137))));
    cluster.expect_get_pod().times(1).return_once(|_| Ok(None));
    let err = step(&live(cluster)).await.unwrap_err();
    assert!(matches!(err, ExecutorError::EnvironmentLost(_)), "{err}");
    assert!(err.retryable());
}

/// What a scripted exec is, from its argv: the step's start, its follow,
/// the read of its status, or the runner's probe.
fn kind_of(argv: &[String]) -> &'static str {
    match argv {
        [one] if one == "true" => "probe",
        [cat, _] if cat == "cat" => "status",
        [_, _, script] if script.contains("baseline %s") => "oom counters",
        [_, _, script, ..] if script.contains("mkfifo") => "start",
        [_, _, script, ..] if script.contains("while :") => "follow",
        _ => "other",
    }
}

/// A step whose supervisor is gone without a status, in a pod that
/// answers: `oom_kills` is what the pod's memory counters say since the
/// step started.
fn lost_status(oom_kills: &'static str) -> MockCluster {
    let mut cluster = MockCluster::new();
    cluster
        .expect_exec()
        .times(4)
        .returning(move |_, _, argv, _| {
            Ok(match kind_of(argv) {
                // The step's output, then the connection drops: no status.
                "start" => exec("half", Ended::Closed("the exec connection broke".into())),
                // Its supervisor is gone and left no status.
                "follow" => step_exec(
                    argv,
                    "",
                    Ended::Exited(executor_container::detached::FOLLOW_LOST),
                ),
                "probe" => exec("", Ended::Exited(0)),
                "oom counters" => exec(oom_kills, Ended::Exited(0)),
                other => panic!("unexpected {other} exec: {argv:?}"),
            })
        });
    cluster
        .expect_get_pod()
        .times(1)
        .return_once(|_| Ok(Some(running())));
    cluster
}

#[tokio::test]
async fn a_status_that_never_came_from_a_pod_that_answers_is_lost_never_success() {
    let cluster = lost_status("oom_kill 0\nbaseline \n");
    let err = step(&live(cluster)).await.unwrap_err();
    assert!(matches!(err, ExecutorError::LostExitStatus { .. }), "{err}");
    assert_eq!(err.kind(), FailureKind::Unreachable);
}

/// Under memory pressure the kernel can take the step's supervisor too,
/// and then no status is written: a kill the pod's counters show since
/// the step started makes it the step's OOM, not a lost status.
#[tokio::test]
async fn a_status_lost_to_an_oom_kill_in_the_pod_is_an_oom_failure() {
    let cluster = lost_status("oom_kill 2\nbaseline 1\n");
    let outcome = step(&live(cluster)).await.unwrap();
    assert!(
        matches!(outcome, CommandOutcome::OutOfMemory { code: None, .. }),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn a_step_whose_stream_broke_is_followed_to_its_own_code() {
    let mut cluster = MockCluster::new();
    let follows = Arc::new(Mutex::new(Vec::<Vec<String>>::new()));
    let seen = follows.clone();
    cluster.expect_exec().returning(move |_, _, argv, _| {
        Ok(match kind_of(argv) {
            "start" => step_exec(
                argv,
                "hal",
                Ended::Closed("the exec connection broke".into()),
            ),
            "follow" => {
                seen.lock().unwrap().push(argv.to_vec());
                step_exec(argv, "f-done\n", Ended::Exited(0))
            }
            "status" => exec("7\n", Ended::Exited(0)),
            "probe" => exec("", Ended::Exited(0)),
            // A failing code is put to the pod's memory counters: none.
            "oom counters" => exec("oom_kill 0\nbaseline \n", Ended::Exited(0)),
            other => panic!("unexpected {other} exec: {argv:?}"),
        })
    });
    cluster.expect_get_pod().returning(|_| Ok(Some(running())));
    let (log, text) = RunLog::memory();
    let outcome = live(cluster)
        .command(
            &RunHandle::in_container("job"),
            &StepCommand {
                id: executor_core::labels::random_hex(8),
                follow_from: None,
                upcoming: Vec::new(),
                name: "s".into(),
                script: "make".into(),
                env: Vec::new(),
            },
            &log,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(outcome, CommandOutcome::exited(7));
    // Followed from the third byte of stdout, none of stderr.
    let follows = follows.lock().unwrap().clone();
    assert_eq!(follows.len(), 1);
    assert_eq!(follows[0][4..6], ["3", "0"]);
    log.flush(std::time::Duration::from_secs(5)).await;
    let text = text.text();
    assert!(text.contains("hal") && text.contains("f-done"), "{text}");
}

#[tokio::test]
async fn on_v4_the_checkout_goes_in_frames_once_the_protocol_is_known() {
    let mut cluster = MockCluster::new();
    let framed_stdin = Stdin::default();
    let argvs = Arc::new(Mutex::new(Vec::<Vec<String>>::new()));
    let (seen, frames) = (argvs.clone(), framed_stdin.clone());
    cluster.expect_exec().returning(move |_, _, argv, stdin| {
        if !stdin {
            // The folder is made first.
            assert_eq!(argv[0], "mkdir");
            return Ok(scripted(false, "", Ended::Exited(0), &Stdin::default()));
        }
        seen.lock().unwrap().push(argv.to_vec());
        // The first, plain `tar x`, learns that the server speaks v4 and
        // is dropped unsent; every copy after goes framed.
        let stdin = if argv[0] == "sh" {
            &frames
        } else {
            &Stdin::default()
        };
        Ok(scripted(false, "", Ended::Exited(0), stdin))
    });
    let executor = live(cluster);
    let checkout = tempfile::tempdir().unwrap();
    std::fs::write(checkout.path().join("f"), "x".repeat(100_000)).unwrap();
    let run = RunHandle::in_container("job");
    for _ in 0..2 {
        executor
            .copy_in(&run, checkout.path(), "/cache")
            .await
            .unwrap();
    }
    let argvs = argvs.lock().unwrap().clone();
    let framed: Vec<_> = argvs
        .iter()
        .filter(|a| a[0] == "sh" && a[2] == crate::framed::UNFRAME)
        .collect();
    let plain: Vec<_> = argvs.iter().filter(|a| a[0] == "tar").collect();
    assert_eq!((plain.len(), framed.len()), (1, 2), "{argvs:?}");
    // Each framed copy ends with its end mark: the archive's zero blocks,
    // then the `0` line.
    let stdin = framed_stdin.lock().unwrap();
    assert!(
        stdin.ends_with(b"\x000\n"),
        "{:?}",
        &stdin[stdin.len().saturating_sub(8)..]
    );
}

#[tokio::test]
async fn on_v5_stdin_is_closed_and_tar_runs_once() {
    let mut cluster = MockCluster::new();
    let tar_stdin = Stdin::default();
    let (given, tars) = (tar_stdin.clone(), Arc::new(AtomicUsize::new(0)));
    let counted = tars.clone();
    cluster.expect_exec().returning(move |_, _, argv, stdin| {
        assert!(!stdin || argv[0] == "tar", "{argv:?}");
        if stdin {
            counted.fetch_add(1, Ordering::SeqCst);
        }
        Ok(scripted(true, "", Ended::Exited(0), &given))
    });
    let executor = live(cluster);
    let checkout = tempfile::tempdir().unwrap();
    std::fs::write(checkout.path().join("f"), "data").unwrap();
    executor
        .copy_in(&RunHandle::in_container("job"), checkout.path(), "/cache")
        .await
        .unwrap();
    assert_eq!(tars.load(Ordering::SeqCst), 1);
    // The plain archive, read to its end (which the session closes on v5).
    let stdin = tar_stdin.lock().unwrap();
    assert!(
        stdin.len() >= 1024 && stdin.len() % 512 == 0,
        "{}",
        stdin.len()
    );
}

/// Copies in with `Compression::Always`: where the image has gzip the
/// archive goes gzip-compressed into `gzip -dc | tar x`; where it has
/// none, as it is into `tar x`. gzip is asked for once per pod.
#[tokio::test]
async fn compressed_copies_go_through_gzip_where_the_image_has_it_and_plain_where_not() {
    for has_gzip in [true, false] {
        let mut cluster = MockCluster::new();
        let tar_stdin = Stdin::default();
        let given = tar_stdin.clone();
        let (probes, unpacks) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(Mutex::new(Vec::new())),
        );
        let (probed, unpacked) = (probes.clone(), unpacks.clone());
        cluster.expect_exec().returning(move |_, _, argv, stdin| {
            if argv.last().is_some_and(|a| a.contains("command -v gzip")) {
                probed.fetch_add(1, Ordering::SeqCst);
                let code = if has_gzip { 0 } else { 1 };
                return Ok(scripted(true, "", Ended::Exited(code), &Stdin::default()));
            }
            if stdin {
                unpacked.lock().unwrap().push(argv.to_vec());
            }
            Ok(scripted(true, "", Ended::Exited(0), &given))
        });
        let executor = K8sExecutor::with_cluster(
            Arc::new(cluster),
            K8sOptions {
                compression: executor_core::tar::Compression::Always,
                ..K8sOptions::default()
            },
        );
        let checkout = tempfile::tempdir().unwrap();
        std::fs::write(checkout.path().join("f"), "data ".repeat(10_000)).unwrap();
        for _ in 0..2 {
            executor
                .stream_in("p", checkout.path(), "/cache")
                .await
                .unwrap();
        }
        assert_eq!(probes.load(Ordering::SeqCst), 1, "gzip is asked for once");
        let unpacks = unpacks.lock().unwrap();
        let stdin = tar_stdin.lock().unwrap();
        if has_gzip {
            assert_eq!(
                unpacks[0][2], r#"gzip -dc | tar x -o -C "$0""#,
                "{unpacks:?}"
            );
            assert_eq!(&stdin[..2], &[0x1f, 0x8b], "a gzip stream");
            assert!(stdin.len() < 2 * 10_000, "{}", stdin.len());
        } else {
            assert_eq!(
                unpacks[0][..2],
                ["tar".to_string(), "x".to_string()],
                "{unpacks:?}"
            );
            assert!(
                stdin.len() >= 50_000 && stdin.len() % 512 == 0,
                "{}",
                stdin.len()
            );
        }
    }
}

#[tokio::test]
async fn a_step_gets_exactly_its_variables_by_name_never_their_values() {
    let spec = RunSpec::new("r", "did:plc:r", ".", "out")
        .env("MODE", "release")
        .step(Step::new("s", "make").env("TOKEN_LIKE", "s3cr3t-value"))
        .step(Step::new("t", "test").env("OTHER", "o"));
    let argvs = Arc::new(Mutex::new(Vec::<Vec<String>>::new()));
    let seen = argvs.clone();
    let mut cluster = MockCluster::new();
    cluster
        .expect_exec()
        .times(1)
        .returning(move |_, _, argv, _| {
            seen.lock().unwrap().push(argv.to_vec());
            Ok(step_exec(argv, "", Ended::Exited(0)))
        });
    let executor = live_from(cluster, &spec);
    let env = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    // The driver's order: standard folders, run variables, step variables;
    // MODE is not asked for.
    let wanted = env(&[("WORK_DIR", "/work"), ("TOKEN_LIKE", "s3cr3t-value")]);
    run_step(&executor, wanted).await.unwrap();
    let line = argvs.lock().unwrap()[0].join(" ");
    assert!(
        line.contains("export TOKEN_LIKE=\"$KNOTLESS_S0_TOKEN_LIKE\""),
        "{line}"
    );
    assert!(!line.contains("s3cr3t-value"), "{line}");
    let unset = line.split("unset ").nth(1).unwrap_or_default();
    for hidden in [
        "MODE",
        "STEPS_DIR",
        "KNOTLESS_S0_TOKEN_LIKE",
        "KNOTLESS_S1_OTHER",
    ] {
        assert!(unset.contains(hidden), "{hidden} stays: {line}");
    }
    assert!(!unset.contains("WORK_DIR "), "{line}");
}

#[tokio::test]
async fn a_step_variable_the_run_was_not_started_with_is_refused_before_any_exec() {
    let mut cluster = MockCluster::new();
    cluster.expect_exec().times(0);
    let executor = live(cluster);
    let err = run_step(&executor, vec![("NEW".into(), "v4lu3-x".into())])
        .await
        .unwrap_err();
    assert!(matches!(err, ExecutorError::InvalidInput(_)), "{err}");
    assert!(err.to_string().contains("StepCommand::env NEW"), "{err}");
    assert!(!err.to_string().contains("v4lu3-x"), "{err}");
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
