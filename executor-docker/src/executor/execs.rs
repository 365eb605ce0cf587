//! The runner's own execs in a container, and what an exec's end means:
//! a settled status, a step's process tree killed, an OOM kill or a
//! container gone.

use std::convert::Infallible;

use super::*;
use executor_container::container::gather::{Frame, Gathered};
use executor_container::container::oom;
use executor_container::container::StepEnvironment;
use executor_container::detached::{marks_its_end, ExecEnd, StepExec, StepFiles};
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::engine::StepStream;

impl DockerExecutor {
    /// Runs a runner-internal command as root, failing with its output;
    /// returns the first 4 KiB of its output.
    pub(super) async fn exec_as_root(
        &self,
        id: &str,
        script: &str,
        what: &str,
    ) -> Result<String, ExecutorError> {
        self.exec_as_root_with(id, script, &[], what).await
    }

    /// [`DockerExecutor::exec_as_root`] with `args` as `$1`, `$2`, ...:
    /// values that never become the script's text.
    ///
    /// Every such script is the runner's own and safe to run again: one
    /// whose exec got no answer, or whose connection broke before its
    /// status came, runs again within `reconnect_timeout`.
    pub(super) async fn exec_as_root_with(
        &self,
        id: &str,
        script: &str,
        args: &[&str],
        what: &str,
    ) -> Result<String, ExecutorError> {
        executor_core::outage::ride_out(what, self.options.reconnect_timeout, || {
            self.exec_as_root_once(id, script, args, what)
        })
        .await
    }

    /// One try of [`DockerExecutor::exec_as_root_with`]: for a probe,
    /// whose answer is whether the engine and container answer now.
    pub(super) async fn exec_as_root_once(
        &self,
        id: &str,
        script: &str,
        args: &[&str],
        what: &str,
    ) -> Result<String, ExecutorError> {
        let mut cmd = vec!["sh".into(), "-c".into(), script.into(), "sh".into()];
        cmd.extend(args.iter().map(|a| a.to_string()));
        let exec = ExecSpec {
            cmd,
            env: Vec::new(),
            working_dir: "/".into(),
            user: Some("0".into()),
            stdin: false,
        };
        let exec_id = self.engine.exec_create(id, &exec).await?;
        let mut output = self.engine.exec_start(&exec_id).await?;
        let mut said = Vec::new();
        while let Some(chunk) = output.next().await {
            let (_, chunk) = chunk?;
            if said.len() < 4096 {
                said.extend_from_slice(&chunk[..chunk.len().min(4096 - said.len())]);
            }
        }
        match self.settled(&exec_id).await?.exit_code {
            Some(0) => Ok(String::from_utf8_lossy(&said).into_owned()),
            Some(code) => Err(ExecutorError::backend(
                what,
                format!("exit {code}: {}", String::from_utf8_lossy(&said).trim()),
            )),
            None => Err(ExecutorError::LostExitStatus {
                what: what.to_string(),
                detail: "the engine reported no exit code".into(),
            }),
        }
    }

    /// Inspects an exec until it is no longer running, within [`EXEC_SETTLE`].
    pub(super) async fn settled(
        &self,
        exec_id: &str,
    ) -> Result<crate::engine::ExecState, ExecutorError> {
        let deadline = tokio::time::Instant::now() + EXEC_SETTLE;
        let mut pause = Duration::from_millis(5);
        loop {
            let state = self.engine.exec_inspect(exec_id).await?;
            if !state.running {
                return Ok(state);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(ExecutorError::LostExitStatus {
                    what: format!("exec {exec_id}"),
                    detail: format!("its output ended but it still ran after {EXEC_SETTLE:?}"),
                });
            }
            // The engine has no call that waits for an exec to end: poll, backing off.
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(200));
        }
    }

    /// Whether the container still runs commands. A container being killed
    /// from outside may still be inspected as running for a moment after its
    /// processes died; an exec tells for sure.
    pub(super) async fn answers(&self, id: &str) -> bool {
        self.exec_as_root_once(id, "true", &[], "probing the container")
            .await
            .is_ok()
    }

    /// Whether the container's memory cgroup counted an OOM kill since
    /// the step of `files` started ([`oom`]). Docker sets `OOMKilled`
    /// only when the container's main process dies of it, not an exec's.
    pub(super) async fn new_oom_kill(&self, id: &str, files: &StepFiles) -> bool {
        let probe = oom::probe(files);
        match self
            .exec_as_root_once(id, &probe, &[], "reading OOM counters")
            .await
        {
            Ok(said) => oom::killed_since_start(&said),
            Err(_) => false,
        }
    }

    /// What a missing or failing exit code means, from the container's
    /// state: an error when the container is gone, the OOM kill's words
    /// when the kernel killed in it.
    pub(super) async fn explain(
        &self,
        id: &str,
        code: Option<i64>,
        files: &StepFiles,
    ) -> Result<Option<String>, ExecutorError> {
        let state = self.engine.inspect(id).await?;
        // The keep-alive is `sh`: a container whose main process could
        // not be started (the init's exec failed, 127) has an image
        // without one, which no attempt can fix.
        if state.exists && !state.running && state.exit_code == Some(127) {
            return Err(ExecutorError::image(
                "starting the environment",
                format!(
                    "the image (RunSpec::image) has no sh: container {id} could not start its keep-alive `sh` (exit 127), and every step runs as `sh -ec`; use an image with a POSIX shell at /bin/sh"
                ),
                false,
            ));
        }
        if !state.exists || !state.running {
            return Err(ExecutorError::EnvironmentLost(format!(
                "container {id} was {} while the step ran",
                if state.exists { "stopped" } else { "removed" }
            )));
        }
        // Inspect may still say running just after the container's main
        // process died; a lost code or a kill asks the container itself.
        if (code.is_none() || code == Some(137)) && !state.oom_killed && !self.answers(id).await {
            return Err(ExecutorError::EnvironmentLost(format!(
                "container {id} was killed while the step ran"
            )));
        }
        // A step with no status is asked too: under pressure the kernel can
        // take the step's supervisor after (or instead of) the step.
        if code != Some(0) && (state.oom_killed || self.new_oom_kill(id, files).await) {
            let limit = self.options.memory.map(|m| format!("{} MiB", m >> 20));
            return Ok(Some(oom::words(limit.as_deref())));
        }
        Ok(None)
    }
}

/// Sends an exec's output into the writers until it ends: `None` when
/// its stream ended as a whole one does, else how it ended (interrupted,
/// or cut). A slow log holds the output back (back-pressure on the
/// step); an interrupt still ends it at once.
pub(super) async fn pump(
    output: crate::engine::ExecOutput,
    stdout: &mut (dyn AsyncWrite + Send + Unpin),
    stderr: &mut (dyn AsyncWrite + Send + Unpin),
    interrupt: &CancellationToken,
) -> Result<Option<ExecEnd>, ExecutorError> {
    let mut frames = output.map_ok(|(stream, bytes)| Frame::<Infallible>::Output(stream, bytes));
    let mut gathered = Gathered::new();
    let mut broke = None;
    let pumped = async {
        while let Some(chunk) = gathered.next(&mut frames).await {
            let written = match chunk {
                Ok(Frame::Output(StepStream::Stdout, bytes)) => stdout.write_all(&bytes).await,
                Ok(Frame::Output(StepStream::Stderr, bytes)) => stderr.write_all(&bytes).await,
                Ok(Frame::Other(never)) => match never {},
                Err(err) => {
                    broke = Some(err.to_string());
                    break;
                }
            };
            if let Err(err) = written {
                return Err(ExecutorError::backend(
                    "writing the step's output",
                    err.to_string(),
                ));
            }
        }
        Ok(())
    };
    tokio::select! {
        r = pumped => r?,
        _ = interrupt.cancelled() => return Ok(Some(ExecEnd::Interrupted)),
    }
    // The engine kills an exec's own process when its client goes
    // away, so a code after a broken stream is that kill's, not the
    // step's.
    Ok(broke.map(|why| ExecEnd::Cut(format!("output broke off: {why}"))))
}

/// The exit code Docker records for an exec whose attached client went
/// away (it kills the exec's process), whatever the process would have
/// exited with.
const ENGINE_LOST_CLIENT: i64 = 126;

/// A step's execs in its container, for the step protocol: as the step's
/// user, in its folder, with its variables.
pub(super) struct StepChannel<'a> {
    pub(super) executor: &'a DockerExecutor,
    pub(super) id: &'a str,
    pub(super) env: Vec<(String, String)>,
    pub(super) working_dir: String,
}

/// The container's state and counters explain an ending the code cannot.
#[async_trait]
impl StepEnvironment for StepChannel<'_> {
    async fn explain(
        &self,
        code: Option<i32>,
        files: &StepFiles,
    ) -> Result<Option<CommandOutcome>, ExecutorError> {
        let oom = self
            .executor
            .explain(self.id, code.map(i64::from), files)
            .await?;
        Ok(oom.map(|detail| CommandOutcome::OutOfMemory { code, detail }))
    }
}

#[async_trait]
impl StepExec for StepChannel<'_> {
    async fn exec(
        &self,
        argv: &[String],
        stdout: &mut (dyn AsyncWrite + Send + Unpin),
        stderr: &mut (dyn AsyncWrite + Send + Unpin),
        interrupt: &CancellationToken,
    ) -> Result<ExecEnd, ExecutorError> {
        let engine = &self.executor.engine;
        let exec = ExecSpec {
            cmd: argv.to_vec(),
            env: self.env.clone(),
            working_dir: self.working_dir.clone(),
            user: self.executor.user_of(self.id),
            stdin: false,
        };
        let exec_id = engine.exec_create(self.id, &exec).await?;
        let output = engine.exec_start(&exec_id).await?;
        if let Some(end) = pump(output, stdout, stderr, interrupt).await? {
            return Ok(end);
        }
        // A start's or a follow's end marks carry its status: asking the
        // engine would cost a call a step, and a code it recorded after
        // killing the exec's own process would be the kill's.
        if marks_its_end(argv) {
            return Ok(ExecEnd::Ended);
        }
        Ok(match self.executor.settled(&exec_id).await {
            // An attached stream whose connection was dropped ends as a
            // normal one does, and the engine then kills the exec and
            // records 126 for it. A step may exit 126 itself: its status
            // file says which, so 126 is followed like a cut (two execs
            // more, only for this code).
            Ok(state) if state.exit_code == Some(ENGINE_LOST_CLIENT) => ExecEnd::Cut(format!(
                "the engine reported exit {ENGINE_LOST_CLIENT}, as it does for an exec whose client went away"
            )),
            Ok(state) => match state.exit_code {
                Some(code) => ExecEnd::Exited(i32::try_from(code).unwrap_or(i32::MAX)),
                None => ExecEnd::Cut("the engine reported no exit code".into()),
            },
            Err(err) => ExecEnd::Cut(err.to_string()),
        })
    }

    async fn kill(&self, script: &str) -> Result<(), ExecutorError> {
        // The next steps' starts waiting at their gates hold processes the
        // kill may need (the step may have left none free): they go first,
        // and open again as usual.
        self.executor.ahead.let_go(self.id);
        self.executor.channels.close(self.id);
        self.executor
            .exec_as_root(self.id, script, "killing the step")
            .await
            .map(|_| ())
    }
}
