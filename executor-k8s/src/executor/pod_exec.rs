//! The runner's own commands in the pod: checked execs, and streams in
//! on either exec protocol.

use std::path::Path;

use executor_container::container::compressing::{copied_out, pack_out_argv};
use executor_container::detached::{ExecEnd, StepExec, StepFiles};
use executor_core::outage::ride_out;
use executor_core::tar::{
    pack_dir, unpack_untrusted, unpack_untrusted_gzipped_or_not, PackStream, UnpackLimits,
    UnpackSummary,
};
use executor_core::ExecutorError;
use tokio_util::sync::CancellationToken;

use super::{step_fate, K8sExecutor, LiveRun};
use crate::cluster::{Ended, ExecIo, ExecSession};
use crate::job::CONTAINER;
use executor_container::container::{oom, StepEnvironment};
use executor_core::CommandOutcome;

impl K8sExecutor {
    /// Runs `argv` in the pod with `stdin` streamed in, stdout and stderr
    /// into the given writers; `Ok` only on exit 0.
    pub(super) async fn exec_checked(
        &self,
        pod: &str,
        argv: Vec<String>,
        stdin: Option<&mut (dyn tokio::io::AsyncRead + Send + Unpin)>,
        stdout: &mut (dyn tokio::io::AsyncWrite + Send + Unpin),
        what: &str,
    ) -> Result<(), ExecutorError> {
        let exec = self
            .cluster
            .exec(pod, CONTAINER, &argv, stdin.is_some())
            .await?;
        self.finish_checked(exec, stdin, stdout, what).await
    }

    /// Drives a started exec to its end; `Ok` only on exit 0.
    pub(super) async fn finish_checked(
        &self,
        exec: Box<dyn ExecSession>,
        stdin: Option<&mut (dyn tokio::io::AsyncRead + Send + Unpin)>,
        stdout: &mut (dyn tokio::io::AsyncWrite + Send + Unpin),
        what: &str,
    ) -> Result<(), ExecutorError> {
        let (ended, said) = finish(exec, stdin, stdout).await?;
        checked(ended, &said, what)
    }

    /// Streams `dir` into `target` as tar over an exec and checks tar's status.
    pub(super) async fn stream_in(
        &self,
        pod: &str,
        dir: &Path,
        target: &str,
    ) -> Result<(), ExecutorError> {
        let what = format!("copying {} into {target}", dir.display());
        self.stream_packed(pod, || pack_dir(dir), target, &what)
            .await
    }

    /// Streams the archive `pack` makes into `target` as tar over an exec
    /// and checks tar's status.
    ///
    /// On v5 stdin is closed at the archive's end. v4 cannot close stdin
    /// without closing the socket (and losing the status), and busybox tar
    /// reads to end of file, so there the stream goes in frames (see
    /// [`crate::framed`]); it is packed once either way (`pack` is called
    /// when the protocol is known). The first copy into a pod is sent
    /// before the protocol is known, so its stream's first line says
    /// which it is ([`crate::framed::PLAIN_OR_FRAMED`]). Compressed where
    /// [`K8sOptions::compression`](crate::K8sOptions::compression) says so
    /// and the image has `gzip`: `tar`'s status, the pipe's last, is the
    /// copy's, and a stream cut short is a short gzip stream it fails on.
    /// The first compressed copy into a pod looks for `gzip` itself; where
    /// there is none it reads nothing, and the copy goes again, plain.
    ///
    /// A copy whose exec could not open or whose connection broke before
    /// its status came (the API server or the kubelet gone a while) goes
    /// again, whole, within `reconnect_timeout`: unpacking the archive
    /// again over what a cut copy left is safe.
    pub(super) async fn stream_packed(
        &self,
        pod: &str,
        pack: impl Fn() -> PackStream,
        target: &str,
        what: &str,
    ) -> Result<(), ExecutorError> {
        let pack = &pack;
        ride_out(what, self.options.reconnect_timeout, move || {
            self.stream_packed_once(pod, pack, target, what)
        })
        .await
    }

    async fn stream_packed_once(
        &self,
        pod: &str,
        pack: &impl Fn() -> PackStream,
        target: &str,
        what: &str,
    ) -> Result<(), ExecutorError> {
        loop {
            // Whether the image has gzip is learnt by the first copy in
            // itself, not by an exec of its own before it: over a long
            // link that exec was two round trips before the first step.
            let known = self.gzip_known(pod);
            let gzip = known != Some(false) && self.compresses().await;
            let probing = gzip && known.is_none();
            let (ended, said) = self
                .stream_packed_as(pod, pack, unpack_argv(target, gzip, probing), gzip)
                .await?;
            if probing {
                match ended {
                    Ended::Exited(NO_GZIP) => {
                        tracing::info!(pod, "the image has no gzip: copies in go uncompressed");
                        self.gzip_found(pod, false);
                        continue;
                    }
                    Ended::Exited(0) => self.gzip_found(pod, true),
                    _ => {}
                }
            }
            return checked(ended, &said, what);
        }
    }

    /// One copy of [`K8sExecutor::stream_packed`]: `unpack` run with the
    /// archive (gzipped when `gzip`) on its stdin, on either protocol.
    async fn stream_packed_as(
        &self,
        pod: &str,
        pack: &impl Fn() -> PackStream,
        unpack: Vec<String>,
        gzip: bool,
    ) -> Result<(Ended, String), ExecutorError> {
        use crate::framed::{Framed, Prefixed, FRAMED, PLAIN, PLAIN_OR_FRAMED, UNFRAME};
        let pack = || if gzip { pack().gzip() } else { pack() };
        // v4: the stream goes in frames that a shell loop in the pod
        // unframes, so tar sees end of file while stdin stays open.
        let framed = || {
            if gzip {
                Framed::eager(pack())
            } else {
                Framed::new(pack())
            }
        };
        let unframing = |script: &str| {
            let mut argv: Vec<String> = vec!["sh".into(), "-c".into(), script.into(), "sh".into()];
            argv.extend(unpack.iter().cloned());
            argv
        };
        let known = *self.v5.lock().unwrap_or_else(|p| p.into_inner());
        match known {
            Some(true) => {
                let exec = self.cluster.exec(pod, CONTAINER, &unpack, true).await?;
                finish(exec, Some(&mut pack()), &mut tokio::io::sink()).await
            }
            Some(false) => {
                let exec = self
                    .cluster
                    .exec(pod, CONTAINER, &unframing(UNFRAME), true)
                    .await?;
                finish(exec, Some(&mut framed()), &mut tokio::io::sink()).await
            }
            None => {
                // The protocol is the connection's answer to the command:
                // the stream's first line tells the command how it comes.
                let exec = self
                    .cluster
                    .exec(pod, CONTAINER, &unframing(PLAIN_OR_FRAMED), true)
                    .await?;
                let v5 = exec.closes_stdin();
                *self.v5.lock().unwrap_or_else(|p| p.into_inner()) = Some(v5);
                if v5 {
                    let mut plain = Prefixed::new(PLAIN, pack());
                    finish(exec, Some(&mut plain), &mut tokio::io::sink()).await
                } else {
                    let mut framed = Prefixed::new(FRAMED, framed());
                    finish(exec, Some(&mut framed), &mut tokio::io::sink()).await
                }
            }
        }
    }

    /// One copy of `path` in `pod` out into `dest` through the untrusted
    /// unpacker, compressed where the image has gzip (the stream says which).
    pub(super) async fn folder_out(
        &self,
        pod: &str,
        path: &str,
        dest: &Path,
        limits: UnpackLimits,
        what: &str,
    ) -> Result<UnpackSummary, ExecutorError> {
        let (mut writer, reader) = tokio::io::duplex(256 * 1024);
        let gzip = self.compresses().await;
        let argv = if gzip {
            pack_out_argv(path)
        } else {
            vec![
                "tar".into(),
                "c".into(),
                "-C".into(),
                path.to_string(),
                ".".into(),
            ]
        };
        let produce = async {
            let r = self.exec_checked(pod, argv, None, &mut writer, what).await;
            drop(writer);
            r
        };
        // The unpacker's limits count what comes out of the decoder: a
        // small stream that inflates past them is refused as it grows.
        let consume = async {
            if gzip {
                unpack_untrusted_gzipped_or_not(reader, dest, limits).await
            } else {
                unpack_untrusted(reader, dest, limits).await
            }
        };
        let (produced, consumed) = tokio::join!(produce, consume);
        copied_out(produced, consumed)
    }

    /// Runs `argv` in the pod, a command of the runner's that is safe to
    /// run again: one whose exec got no answer, or whose connection broke
    /// before its status came, runs again within `reconnect_timeout`.
    /// Its stdout; `Ok` only on exit 0.
    pub(super) async fn exec_again(
        &self,
        pod: &str,
        argv: &[String],
        what: &str,
    ) -> Result<Vec<u8>, ExecutorError> {
        ride_out(what, self.options.reconnect_timeout, || async {
            let mut said = Vec::new();
            self.exec_checked(pod, argv.to_vec(), None, &mut said, what)
                .await
                .map(|()| said)
        })
        .await
    }

    /// What the copies in know of `pod`'s gzip: `None` until one learnt it.
    fn gzip_known(&self, pod: &str) -> Option<bool> {
        self.gzip_in
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(pod)
            .copied()
    }

    fn gzip_found(&self, pod: &str, has: bool) {
        self.gzip_in
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(pod.to_string(), has);
    }

    /// Whether the pod's memory cgroup counted an OOM kill since the step
    /// of `files` started ([`oom`]).
    pub(super) async fn new_oom_kill(&self, pod: &str, files: &StepFiles) -> bool {
        let argv = vec!["sh".into(), "-c".into(), oom::probe(files)];
        // A tool in the pod may print without end: the counters are short.
        let mut said = executor_core::text::HeadBuffer::new(4096);
        let probed = self
            .exec_checked(pod, argv, None, &mut said, "reading OOM counters")
            .await;
        probed.is_ok() && oom::killed_since_start(&String::from_utf8_lossy(said.kept()))
    }

    /// Whether the pod's container still runs commands.
    pub(super) async fn answers(&self, pod: &str) -> bool {
        self.exec_checked(
            pod,
            vec!["true".into()],
            None,
            &mut tokio::io::sink(),
            "probing the pod",
        )
        .await
        .is_ok()
    }
}

/// A step's execs in its pod, for the step protocol; the pod's status
/// explains an ending the code cannot.
pub(super) struct StepChannel<'a> {
    pub(super) executor: &'a K8sExecutor,
    pub(super) live: &'a LiveRun,
}

#[async_trait::async_trait]
impl StepEnvironment for StepChannel<'_> {
    async fn explain(
        &self,
        code: Option<i32>,
        files: &StepFiles,
    ) -> Result<Option<CommandOutcome>, ExecutorError> {
        if let Some(fate) = self.executor.lost_environment(self.live).await {
            return step_fate(fate, code).map(Some);
        }
        // The pod lives on: the kernel may still have killed in it for
        // memory, as it picks the step, not the container's own process.
        // A step with no status at all is asked too: under pressure the
        // kernel can take the step's supervisor after (or instead of) the
        // step, and then no status is written.
        if code != Some(0) && self.executor.new_oom_kill(&self.live.pod, files).await {
            return Ok(Some(CommandOutcome::OutOfMemory {
                code,
                detail: oom::words(self.executor.options.memory_limit.as_deref()),
            }));
        }
        Ok(None)
    }
}

#[async_trait::async_trait]
impl StepExec for StepChannel<'_> {
    async fn exec(
        &self,
        argv: &[String],
        stdout: &mut (dyn tokio::io::AsyncWrite + Send + Unpin),
        stderr: &mut (dyn tokio::io::AsyncWrite + Send + Unpin),
        interrupt: &CancellationToken,
    ) -> Result<ExecEnd, ExecutorError> {
        let exec = self
            .executor
            .cluster
            .exec(&self.live.pod, CONTAINER, argv, false)
            .await?;
        let io = ExecIo {
            stdin: None,
            stdout,
            stderr,
        };
        Ok(match exec.finish(io, interrupt).await? {
            Ended::Exited(code) => ExecEnd::Exited(code),
            Ended::Interrupted => ExecEnd::Interrupted,
            // The server's own failure (no exit code) or a broken
            // connection: the step may still run; its files say.
            Ended::Failed(why) | Ended::Closed(why) => ExecEnd::Cut(why),
        })
    }

    async fn kill(&self, script: &str) -> Result<(), ExecutorError> {
        // The step channel's shell holds a process the kill may need (the
        // step may have left none free): it goes first, and opens again
        // for the next step.
        self.executor.channels.close(&self.live.pod);
        let argv = vec!["sh".into(), "-c".into(), script.into()];
        self.executor
            .exec_checked(
                &self.live.pod,
                argv,
                None,
                &mut tokio::io::sink(),
                "killing the step",
            )
            .await
    }
}

/// The exit status of a first compressed copy in whose image has no
/// `gzip` ([`unpack_argv`]); it extracted nothing.
const NO_GZIP: i32 = 97;

/// The command a copy into `target` runs: `tar x`, behind `gzip -dc` when
/// `gzip`; `probing`, it first looks for gzip and exits [`NO_GZIP`]
/// without it, having read nothing.
fn unpack_argv(target: &str, gzip: bool, probing: bool) -> Vec<String> {
    // `-o`: files belong to whoever extracts them. The pod drops every
    // capability, so root cannot give them the host's owners (GNU tar
    // would fail on that; busybox ignores it).
    if !gzip {
        return ["tar", "x", "-o", "-C", target].map(String::from).to_vec();
    }
    let unpack = r#"gzip -dc | tar x -o -C "$0""#;
    let script = if probing {
        format!("command -v gzip >/dev/null 2>&1 || exit {NO_GZIP}; {unpack}")
    } else {
        unpack.to_string()
    };
    vec!["sh".into(), "-c".into(), script, target.into()]
}

/// Drives a started exec to its end: how it ended, and the start of what
/// it said on stderr.
async fn finish(
    exec: Box<dyn ExecSession>,
    stdin: Option<&mut (dyn tokio::io::AsyncRead + Send + Unpin)>,
    stdout: &mut (dyn tokio::io::AsyncWrite + Send + Unpin),
) -> Result<(Ended, String), ExecutorError> {
    // Only the start of a tool's complaint is shown; a hostile `tar` in
    // the pod may print without end.
    let mut stderr = executor_core::text::HeadBuffer::new(4096);
    // Reborrowed: the session's streams live only as long as this call.
    let io = ExecIo {
        stdin: stdin.map(|s| s as &mut (dyn tokio::io::AsyncRead + Send + Unpin)),
        stdout: &mut *stdout,
        stderr: &mut stderr,
    };
    let ended = exec.finish(io, &CancellationToken::new()).await?;
    Ok((ended, stderr.text()))
}

/// `Ok` only for exit 0; otherwise an error naming `what`.
fn checked(ended: Ended, said: &str, what: &str) -> Result<(), ExecutorError> {
    match ended {
        Ended::Exited(0) => Ok(()),
        Ended::Exited(code) => Err(ExecutorError::backend(what, format!("exit {code}: {said}"))),
        Ended::Failed(msg) => Err(ExecutorError::backend(what, msg)),
        Ended::Closed(why) => Err(ExecutorError::LostExitStatus {
            what: what.to_string(),
            detail: why,
        }),
        Ended::Interrupted => Err(ExecutorError::Interrupted),
    }
}
