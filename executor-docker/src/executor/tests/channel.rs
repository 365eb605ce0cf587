//! Steps through the container's channel, over the mocked engine.

use std::sync::Arc;

use executor_core::{CommandOutcome, Executor, ExecutorError, RunHandle, RunLog};
use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;

use super::step;
use crate::engine::{ContainerState, ExecState, MockEngine, StepStream};
use crate::executor::DockerExecutor;
use crate::DockerOptions;

/// A step through the container's channel: one exec in the run's folder
/// as the run's user, and the step's start one message on its stdin that
/// sets the step's variables and enters the folder.
#[tokio::test]
async fn a_step_goes_through_the_channel_with_its_folder_and_variables() {
    let sent = Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
    let seen = sent.clone();
    let mut mock = MockEngine::new();
    mock.expect_exec_create().returning(|id, exec| {
        if exec.cmd != executor_container::detached::channel_argv() {
            // The failing code is put to the memory counters: none counted.
            return Ok("probe".into());
        }
        assert_eq!(id, "c");
        assert_eq!(exec.working_dir, "/work");
        assert!(exec.env.is_empty(), "{:?}", exec.env);
        Ok("channel".into())
    });
    mock.expect_exec_start()
        .returning(|_| Ok(futures_util::stream::empty().boxed()));
    mock.expect_exec_inspect().returning(|_| {
        Ok(ExecState {
            running: false,
            exit_code: Some(0),
        })
    });
    mock.expect_exec_start_with_input()
        .times(1)
        .returning(move |_| {
            let (input, mut stdin) = tokio::io::duplex(64 * 1024);
            let (mut out_end, out) = tokio::io::duplex(64 * 1024);
            let (mut err_end, err) = tokio::io::duplex(64 * 1024);
            let seen = seen.clone();
            tokio::spawn(async move {
                // What the channel's shell reads, recorded, then answered
                // as a step that exits 3.
                let mut tee = Recording(&mut stdin, seen);
                executor_container::detached::answer_as_channel(
                    &mut tee,
                    &mut out_end,
                    &mut err_end,
                    3,
                )
                .await
                .unwrap();
            });
            let chunks = |stream: StepStream, reader: tokio::io::DuplexStream| {
                tokio_util::io::ReaderStream::new(reader).map(move |c| {
                    c.map(|b| (stream, b))
                        .map_err(|e| ExecutorError::backend("mock", e.to_string()))
                })
            };
            let output = futures_util::stream::select(
                chunks(StepStream::Stdout, out),
                chunks(StepStream::Stderr, err),
            )
            .boxed();
            Ok((output, Box::pin(input) as crate::engine::ExecInput))
        });
    mock.expect_inspect().returning(|_| {
        Ok(ContainerState {
            exists: true,
            running: true,
            ..ContainerState::default()
        })
    });
    let executor = DockerExecutor::with_engine(Arc::new(mock), DockerOptions::default());
    let (log, text) = RunLog::memory();
    let outcome = executor
        .command(
            &RunHandle::in_container("c"),
            &step(),
            &log,
            CancellationToken::new(),
        )
        .await;
    log.flush(std::time::Duration::from_secs(5)).await;
    let sent = String::from_utf8(sent.lock().unwrap().clone()).unwrap();
    assert!(
        sent.contains("\n(cd -- '/work' || exit 125\n_kd='/.knotless/stepio-")
            && sent.contains("\n_kfl=-ec; _kpre='export SECRET='\\''v'\\''; '\n_kstart \"$@\"\n"),
        "{sent}"
    );
    assert_eq!(
        outcome.unwrap(),
        CommandOutcome::exited(3),
        "{}",
        text.text()
    );
}

/// A variable a shell cannot set would need a start of its own, which
/// cannot sign the step's status: refused by name, with no call to the
/// engine (the mock has no expectation).
#[tokio::test]
async fn a_variable_a_shell_cannot_set_is_refused_by_name() {
    let executor =
        DockerExecutor::with_engine(Arc::new(MockEngine::new()), DockerOptions::default());
    let mut odd = step();
    odd.env.push(("a-b".into(), "x".into()));
    let refused = executor
        .command(
            &RunHandle::in_container("c"),
            &odd,
            &RunLog::discard(),
            CancellationToken::new(),
        )
        .await;
    match refused {
        Err(ExecutorError::InvalidInput(msg)) => {
            assert!(
                msg.contains("StepCommand::env") && msg.contains("\"a-b\""),
                "{msg}"
            );
        }
        other => panic!("{other:?}"),
    }
}

/// A reader that keeps a copy of what was read.
struct Recording<'a, R>(&'a mut R, Arc<std::sync::Mutex<Vec<u8>>>);

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Recording<'_, R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut *self.0).poll_read(cx, buf);
        let new = buf.filled()[before..].to_vec();
        self.1.lock().unwrap().extend(new);
        polled
    }
}
