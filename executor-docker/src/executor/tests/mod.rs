//! The executor over a mocked engine seam: paths a real engine rarely shows.

use std::sync::Arc;

use executor_core::{
    CommandOutcome, Executor, ExecutorError, RunHandle, RunLog, RunSpec, StepCommand,
};
use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;

use super::DockerExecutor;
use crate::engine::{ContainerState, ExecState, MockEngine, StepStream};
use crate::DockerOptions;

fn step() -> StepCommand {
    StepCommand {
        id: executor_core::labels::random_hex(8),
        follow_from: None,
        upcoming: Vec::new(),
        name: "s".into(),
        script: "echo hi".into(),
        env: vec![("SECRET".into(), "v".into())],
    }
}

/// The id a mock gives the exec `exec`: `name`, and the key of its end
/// marks, if it has one.
fn exec_id(name: &str, exec: &crate::engine::ExecSpec) -> String {
    let key = executor_container::detached::end_key(&exec.cmd).unwrap_or_default();
    format!("{name}:{key}")
}

/// The name and the end marks' key in an id from [`exec_id`].
fn named(exec_id: &str) -> (&str, &str) {
    exec_id.split_once(':').unwrap_or((exec_id, ""))
}

/// The output of step exec `exec_id` that ran to its end with `status`:
/// the begin mark on both streams, `stdout`, then the end mark on both.
fn whole(exec_id: &str, stdout: &str, status: u8) -> crate::engine::ExecOutput {
    let key = named(exec_id).1;
    let begin = bytes::Bytes::from_static(executor_container::detached::BEGIN_MARK);
    let end = bytes::Bytes::from(executor_container::detached::end_mark(key, status));
    futures_util::stream::iter([
        Ok((StepStream::Stdout, begin.clone())),
        Ok((StepStream::Stderr, begin)),
        Ok((StepStream::Stdout, bytes::Bytes::from(stdout.to_string()))),
        Ok((StepStream::Stdout, end.clone())),
        Ok((StepStream::Stderr, end)),
    ])
    .boxed()
}

fn with_exec(mock: &mut MockEngine, state: ExecState) {
    mock.expect_exec_create()
        .returning(|_, exec| Ok(exec_id("exec-1", exec)));
    mock.expect_exec_start()
        .returning(|id| Ok(whole(id, "hi\n", 0)));
    mock.expect_exec_inspect().returning(move |_| Ok(state));
}

/// Runs `step()` in container `c`, which inspects as running.
async fn step_in_running_container(mut mock: MockEngine) -> Result<CommandOutcome, ExecutorError> {
    mock.expect_inspect().returning(|_| {
        Ok(ContainerState {
            exists: true,
            running: true,
            ..ContainerState::default()
        })
    });
    step_in_container(mock).await
}

/// Runs `step()` in container `c` on `mock`.
async fn step_in_container(mock: MockEngine) -> Result<CommandOutcome, ExecutorError> {
    let mut executor = DockerExecutor::with_engine(Arc::new(mock), DockerOptions::default());
    // These are the paths of a step's own exec (what a cut start falls
    // back on); the channel's are below.
    executor.through_channel = false;
    executor
        .command(
            &RunHandle::in_container("c"),
            &step(),
            &RunLog::discard(),
            CancellationToken::new(),
        )
        .await
}

#[tokio::test]
async fn a_missing_exit_code_is_lost_status_never_success() {
    let mut mock = MockEngine::new();
    // The step's exec ends without its end marks, and the engine has no
    // code for it; following the step finds its supervisor gone without a
    // status; the probe that asks whether the container still answers
    // runs and exits 0.
    mock.expect_exec_create().returning(|_, exec| {
        let name = if exec.cmd[2] == "true" {
            "probe"
        } else if exec.cmd[2].contains("while :") && !exec.cmd[2].contains("mkfifo") {
            "follow"
        } else {
            "step"
        };
        Ok(exec_id(name, exec))
    });
    mock.expect_exec_start().returning(|id| {
        let begin = bytes::Bytes::from_static(executor_container::detached::BEGIN_MARK);
        Ok(match named(id).0 {
            "probe" => futures_util::stream::empty().boxed(),
            "follow" => whole(id, "", executor_container::detached::FOLLOW_LOST as u8),
            _ => futures_util::stream::iter([
                Ok((StepStream::Stdout, begin.clone())),
                Ok((StepStream::Stderr, begin)),
            ])
            .boxed(),
        })
    });
    mock.expect_exec_inspect().returning(|id| {
        Ok(ExecState {
            running: false,
            exit_code: match named(id).0 {
                "probe" => Some(0),
                "follow" => Some(i64::from(executor_container::detached::FOLLOW_LOST)),
                _ => None,
            },
        })
    });
    let err = step_in_running_container(mock).await.unwrap_err();
    // The container answered: the step's processes could have done it.
    assert!(err.to_string().contains("was lost"), "{err}");
    assert!(!err.retryable(), "{err}");
}

#[tokio::test]
async fn a_missing_exit_code_from_a_container_that_no_longer_answers_is_a_lost_environment() {
    let mut mock = MockEngine::new();
    // Inspect still says running, as it may just after the keep-alive died,
    // but the step's exec has no code and no other exec starts.
    mock.expect_exec_create().returning(|_, exec| {
        if exec.cmd[2].contains("mkfifo") {
            Ok("step".into())
        } else {
            Err(ExecutorError::backend(
                "creating an exec",
                "container c is not running",
            ))
        }
    });
    mock.expect_exec_start()
        .returning(|_| Ok(futures_util::stream::empty().boxed()));
    mock.expect_exec_inspect().returning(|_| {
        Ok(ExecState {
            running: false,
            exit_code: None,
        })
    });
    let err = step_in_running_container(mock).await.unwrap_err();
    assert!(matches!(err, ExecutorError::EnvironmentLost(_)), "{err}");
}

#[tokio::test]
async fn exit_codes_pass_through_and_the_step_runs_in_work_dir_with_its_env() {
    let outcome = step_with_oom_counter(42, 0).await.unwrap();
    assert_eq!(outcome, CommandOutcome::exited(42));
}

#[tokio::test]
async fn a_failing_step_with_a_new_oom_kill_is_out_of_memory_whatever_its_code() {
    let outcome = step_with_oom_counter(1, 1).await.unwrap();
    assert!(
        matches!(outcome, CommandOutcome::OutOfMemory { code: Some(1), ref detail } if detail.starts_with("OOMKilled")),
        "{outcome:?}"
    );
}

/// Runs `step()` exiting `code` in a running container whose memory
/// cgroup has counted `oom_kills`.
async fn step_with_oom_counter(code: i64, oom_kills: u64) -> Result<CommandOutcome, ExecutorError> {
    let mut mock = MockEngine::new();
    mock.expect_exec_create().returning(|id, exec| {
        if exec.cmd.get(4).map(String::as_str) != Some("echo hi") {
            return Ok("probe".into());
        }
        assert_eq!(id, "c");
        assert_eq!(exec.working_dir, "/work");
        assert_eq!(exec.cmd[..2], ["sh".to_string(), "-c".to_string()]);
        // The step's variables are its shell's alone, set by its start.
        assert!(exec.env.is_empty(), "{:?}", exec.env);
        assert!(exec.cmd[2].contains("\n_kfl=-ec; _kpre='export SECRET='\\''v'\\''; '\n"));
        Ok(exec_id("exec-1", exec))
    });
    mock.expect_exec_start().returning(move |id| {
        if id != "probe" {
            return Ok(whole(id, "", u8::try_from(code).unwrap_or(u8::MAX)));
        }
        let said = format!("oom 0\noom_kill {oom_kills}\n");
        Ok(
            futures_util::stream::iter([Ok((StepStream::Stdout, bytes::Bytes::from(said)))])
                .boxed(),
        )
    });
    mock.expect_exec_inspect().returning(move |id| {
        Ok(ExecState {
            running: false,
            exit_code: Some(if id == "probe" { 0 } else { code }),
        })
    });
    step_in_running_container(mock).await
}

#[tokio::test]
async fn a_failed_upload_removes_the_container_it_created() {
    let dir = tempfile::tempdir().unwrap();
    let mut mock = MockEngine::new();
    mock.expect_image_present().returning(|_| Ok(true));
    mock.expect_create()
        .times(1)
        .returning(|_| Ok("c-new".into()));
    mock.expect_start().returning(|_| Ok(()));
    with_exec(
        &mut mock,
        ExecState {
            running: false,
            exit_code: Some(0),
        },
    );
    mock.expect_upload()
        .returning(|_, _, _, _| Err(ExecutorError::backend("copying into /work", "disk full")));
    mock.expect_remove()
        .withf(|id| id == "c-new")
        .times(1)
        .returning(|_| Ok(()));
    let executor = DockerExecutor::with_engine(Arc::new(mock), DockerOptions::default());
    let spec = RunSpec::new("r", "did:plc:r", dir.path(), dir.path()).image("img");
    let err = executor
        .start(&spec, &RunLog::discard(), CancellationToken::new())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("disk full"), "{err}");
}

#[tokio::test]
async fn an_interrupted_step_is_killed_inside_the_container() {
    let mut mock = MockEngine::new();
    let mut seq = mockall::Sequence::new();
    mock.expect_exec_create()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _| Ok("step-exec".into()));
    mock.expect_exec_start()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_| Ok(futures_util::stream::pending().boxed()));
    // The kill: a root exec reading the step's pid file.
    mock.expect_exec_create()
        .withf(|_, exec| exec.user.as_deref() == Some("0") && exec.cmd[2].contains("kill -KILL"))
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _| Ok("kill-exec".into()));
    mock.expect_exec_start()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_| Ok(futures_util::stream::empty().boxed()));
    mock.expect_exec_inspect().returning(|_| {
        Ok(ExecState {
            running: false,
            exit_code: Some(0),
        })
    });
    let mut executor = DockerExecutor::with_engine(Arc::new(mock), DockerOptions::default());
    executor.through_channel = false;
    let token = CancellationToken::new();
    token.cancel();
    let outcome = executor
        .command(
            &RunHandle::in_container("c"),
            &step(),
            &RunLog::discard(),
            token,
        )
        .await
        .unwrap();
    assert_eq!(outcome, CommandOutcome::Interrupted);
}

#[test]
fn absolute_caches_outside_the_run_folders_get_volumes_of_their_own() {
    let mut run = RunSpec::new("r", "did:plc:x", ".", ".");
    for (key, path) in [
        ("cargo", "/root/.cargo/"),
        ("again", "/root/.cargo"),
        ("inside", "/root/.cargo/registry"),
        ("relative", "target"),
        ("under-work", "/work/target"),
        ("over-work", "/"),
        ("unclean", "/a/../work"),
        ("npm", "/root/.npm"),
    ] {
        run.caches.push(executor_core::CacheSpec {
            key: key.into(),
            path: path.into(),
        });
    }
    assert_eq!(
        super::container::run_volumes(&run),
        [
            "/work",
            "/steps",
            "/outputs",
            "/.knotless",
            "/root/.cargo",
            "/root/.npm"
        ]
    );
}

#[test]
fn the_container_outlives_the_outputs_phase_and_holds_secrets_in_its_env_only() {
    use executor_core::labels::EXPIRES_KEY;
    use executor_core::mask::Secret;
    use std::time::Duration;

    let options = DockerOptions::default();
    let grace = options.expiry_grace.as_secs();
    let executor = DockerExecutor::with_engine(Arc::new(MockEngine::new()), options);
    let run = RunSpec::new("r", "did:plc:r", ".", "out")
        .timeouts(Duration::from_secs(600), Duration::from_secs(60))
        .secret("TOKEN", Secret::new("s3cr3t-value"));
    let before = executor_core::labels::unix_now();
    let container = executor.container_spec(&run, "busybox:local", "00");
    let expires: u64 = container.labels[EXPIRES_KEY].parse().unwrap();
    assert!(expires >= before + 600 + run.outputs_timeout.as_secs() + grace);
    assert_eq!(container.secret_env, run.secrets);
    let body = serde_json::to_string(&crate::bollard_engine::create_body(&container)).unwrap();
    assert!(body.contains("TOKEN=s3cr3t-value"), "{body}");
    let labels = serde_json::to_string(&container.labels).unwrap();
    assert!(!labels.contains("s3cr3t-value"), "{labels}");
}

mod channel;
