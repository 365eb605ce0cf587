//! Steps started through one long-lived exec: each with its own code and
//! output, a channel cut mid-step, and messages cut short; the host
//! channel the held-step cases use too.

use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::io::AsyncRead;

/// Opens the channel's shell on the host with `shell` in place of `sh`;
/// the stdout of the `n`th open (from 0) is cut after `cuts[n]` bytes,
/// and its shell killed then, as an engine kills an exec's process when
/// its client goes away. Its state folder's copier is staged in `copier`,
/// so its starts use `knotless-tee` where this build has one (a step's
/// own exec, [`HostExec`], uses the shell's `tee`).
pub(super) struct HostChannel {
    shell: Vec<String>,
    copier: tempfile::TempDir,
    cuts: Mutex<VecDeque<Option<u64>>>,
    pub(super) opens: AtomicUsize,
    /// Each open's stdin: told when the runner let go of it.
    stdins: Mutex<Vec<Arc<tokio::sync::Notify>>>,
}

impl HostChannel {
    /// Whether the `n`th open's stdin was let go of, waiting up to
    /// `within` for it.
    pub(super) async fn let_go(&self, n: usize, within: Duration) -> bool {
        let gone = self.stdins.lock().unwrap_or_else(|p| p.into_inner())[n].clone();
        tokio::time::timeout(within, gone.notified()).await.is_ok()
    }
}

/// A channel's stdin that says when it is dropped.
struct Watched<W> {
    inner: W,
    dropped: Arc<tokio::sync::Notify>,
}

impl<W> Drop for Watched<W> {
    fn drop(&mut self) {
        self.dropped.notify_one();
    }
}

impl<W: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Watched<W> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl HostChannel {
    /// Ends every agent this channel's opens run, as a process a step
    /// left behind can (same user): `kill -9`, then waits until each is
    /// gone or a zombie, its descriptors closed.
    pub(super) async fn kill_agents(&self) -> usize {
        let agent = self.copier.path().join(AGENT_FILE).display().to_string();
        let mut killed = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            if cmdline.starts_with(agent.as_bytes()) {
                let status = std::process::Command::new("kill")
                    .args(["-9", &pid.to_string()])
                    .status()
                    .unwrap();
                assert!(status.success());
                killed.push(pid);
            }
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        for pid in &killed {
            loop {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                let state = stat.rsplit(") ").next().and_then(|s| s.chars().next());
                if stat.is_empty() || state == Some('Z') {
                    break;
                }
                assert!(std::time::Instant::now() < deadline, "agent {pid} lives on");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        killed.len()
    }

    pub(super) fn new(shell: &[&str], cuts: &[Option<u64>]) -> Arc<Self> {
        Self::staged(shell, cuts, true)
    }

    /// A channel whose state folder has no copier: its starts use `tee`.
    pub(super) fn without_copier(shell: &[&str]) -> Arc<Self> {
        Self::staged(shell, &[], false)
    }

    /// A channel whose state folder has the copier but not the agent, as
    /// one a runner of an older build made: its shell starts the steps.
    pub(super) fn without_agent(shell: &[&str]) -> Arc<Self> {
        let channel = Self::staged(shell, &[], true);
        std::fs::remove_file(channel.copier.path().join(AGENT_FILE)).unwrap();
        channel
    }

    /// A channel whose shell starts its steps (no agent) with a copier
    /// that takes 300 ms to start (a wrapper that waits, then execs it): a
    /// step that ends at once ends before it.
    pub(super) fn with_slow_copier(shell: &[&str]) -> Arc<Self> {
        let channel = Self::without_agent(shell);
        let (dir, copier) = (channel.copier.path(), channel.copier.path().join(TEE_FILE));
        std::fs::rename(&copier, dir.join("real")).unwrap();
        let wrapper = format!(
            "#!/bin/sh\nsleep 0.3\nexec '{}/real' \"$@\"\n",
            dir.display()
        );
        std::fs::write(&copier, wrapper).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&copier, std::fs::Permissions::from_mode(0o755)).unwrap();
        channel
    }

    fn staged(shell: &[&str], cuts: &[Option<u64>], copier_staged: bool) -> Arc<Self> {
        let copier = tempfile::tempdir().unwrap();
        if copier_staged {
            stage_tee(copier.path()).unwrap();
            stage_agent(copier.path()).unwrap();
        }
        Arc::new(HostChannel {
            shell: shell.iter().map(|s| s.to_string()).collect(),
            copier,
            cuts: Mutex::new(cuts.iter().copied().collect()),
            opens: AtomicUsize::new(0),
            stdins: Mutex::new(Vec::new()),
        })
    }
}

#[async_trait]
impl ChannelExec for HostChannel {
    async fn open(&self, argv: &[String]) -> Result<ChannelIo, ExecutorError> {
        self.opens.fetch_add(1, Ordering::SeqCst);
        let mut argv = argv.to_vec();
        for file in [TEE_FILE, AGENT_FILE] {
            argv[2] = argv[2].replace(
                &format!("{}/{file}", crate::container::STATE_DIR),
                &self.copier.path().join(file).display().to_string(),
            );
        }
        argv.splice(0..1, self.shell.iter().cloned());
        let mut child = tokio::process::Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| ExecutorError::backend("opening the channel", e.to_string()))?;
        let cut = self
            .cuts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front()
            .flatten();
        let (stdin, stdout, stderr) = (
            child.stdin.take().unwrap(),
            child.stdout.take().unwrap(),
            child.stderr.take().unwrap(),
        );
        let child = Arc::new(Mutex::new(child));
        let dropped = Arc::new(tokio::sync::Notify::new());
        self.stdins
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(dropped.clone());
        Ok(ChannelIo {
            stdin: Box::new(Watched {
                inner: stdin,
                dropped,
            }),
            stdout: Box::new(CutAfter {
                inner: stdout,
                left: cut,
                child: Some(child.clone()),
            }),
            stderr: Box::new(CutAfter {
                inner: stderr,
                left: None,
                child: None,
            }),
            pump: None,
        })
    }
}

/// A stream that ends after `left` bytes, killing the channel's shell.
struct CutAfter<R> {
    inner: R,
    left: Option<u64>,
    child: Option<Arc<Mutex<tokio::process::Child>>>,
}

impl<R: AsyncRead + Unpin> AsyncRead for CutAfter<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if self.left == Some(0) {
            if let Some(child) = self.child.take() {
                let _ = child.lock().unwrap_or_else(|p| p.into_inner()).start_kill();
            }
            return std::task::Poll::Ready(Ok(()));
        }
        let limit = self.left.map_or(buf.remaining(), |l| {
            buf.remaining()
                .min(usize::try_from(l).unwrap_or(usize::MAX))
        });
        let mut part = tokio::io::ReadBuf::new(buf.initialize_unfilled_to(limit));
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, &mut part);
        let n = part.filled().len();
        if let std::task::Poll::Ready(Ok(())) = polled {
            buf.advance(n);
            if let Some(left) = self.left.as_mut() {
                *left -= n as u64;
            }
        }
        polled
    }
}

/// Runs the step `script` as step `id` through `channel` (its follows,
/// if any, on `exec`): how it ended, the log's text and its output.
pub(super) async fn through(
    channel: &Arc<StepChannel>,
    exec: &HostExec,
    dir: &Path,
    id: &str,
    script: &str,
) -> (StepEnd, String, (String, String)) {
    through_with(channel, exec, dir, id, ("", script), None).await
}

/// [`through`] with the start's `prelude` before `script`, in `working_dir`.
pub(super) async fn through_with(
    channel: &Arc<StepChannel>,
    exec: &HostExec,
    dir: &Path,
    id: &str,
    (prelude, script): (&str, &str),
    working_dir: Option<&str>,
) -> (StepEnd, String, (String, String)) {
    let files = StepFiles::new(&dir.display().to_string(), id);
    let start = files.gated_start_argv(prelude, Script::Inline(script));
    let (log, text) = RunLog::memory();
    let outputs = Outputs::attach(&log);
    let end = run_step_released(
        exec,
        &files,
        &start,
        Some(
            channel
                .start(start.clone(), working_dir, Signing::of(&log, id))
                .unwrap(),
        ),
        &log,
        &CancellationToken::new(),
        FOLLOW_NOW,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    log.flush(Duration::from_secs(30)).await;
    (end, text.text(), outputs.get())
}

#[tokio::test]
async fn steps_go_through_one_channel_each_with_its_own_code_and_output() {
    for shell in shells() {
        let dir = tempfile::tempdir().unwrap();
        let host = HostChannel::new(&shell, &[]);
        let channel = StepChannel::new(host.clone());
        let exec = HostExec::new(&shell, &[]);
        for i in 0..3 {
            let script = format!("echo out {i}; echo err {i} >&2; x=$((1 + {i})); exit $x");
            let (end, text, (out, err)) =
                through(&channel, &exec, dir.path(), &format!("s{i}"), &script).await;
            assert_eq!(end, StepEnd::Exited(1 + i), "{shell:?}: {text}");
            assert_eq!(out, format!("out {i}\n"), "{shell:?}: {text}");
            assert_eq!(err, format!("err {i}\n"), "{shell:?}: {text}");
        }
        assert_eq!(
            host.opens.load(Ordering::SeqCst),
            1,
            "{shell:?}: one channel"
        );
        assert!(
            exec.execs.lock().unwrap().is_empty(),
            "{shell:?}: no step needed an exec of its own"
        );
    }
}

#[tokio::test]
async fn a_channel_cut_mid_step_is_followed_and_the_step_runs_once() {
    for shell in shells() {
        let dir = tempfile::tempdir().unwrap();
        let host = HostChannel::new(&shell, &[Some(begun(5000))]);
        let channel = StepChannel::new(host.clone());
        let exec = HostExec::new(&shell, &[]);
        let (end, text, (out, err)) = through(&channel, &exec, dir.path(), "cut", NUMBERED).await;
        assert_eq!(
            end,
            StepEnd::Exited(7),
            "{shell:?}: {}",
            runner_lines(&text)
        );
        assert_eq!(out, numbered_lines(), "{shell:?}: every line once");
        assert_eq!(err, "done\n");
        assert!(
            text.contains("following it on"),
            "{shell:?}: {}",
            runner_lines(&text)
        );
        let (end, _, (out, _)) = through(&channel, &exec, dir.path(), "after", "echo after").await;
        assert_eq!((end, out.as_str()), (StepEnd::Exited(0), "after\n"));
        assert_eq!(
            host.opens.load(Ordering::SeqCst),
            2,
            "{shell:?}: a new channel"
        );
    }
}

#[tokio::test]
async fn a_message_cut_short_or_not_a_message_runs_nothing() {
    for shell in shells() {
        for sent in [
            "100\n: 0a\n(echo ran)".to_string(),
            "x\n: 0a\n(echo ran)\n#knotless-end".to_string(),
            format!(
                "{}\n: 0a\n(echo ran)\n#knotless-nd",
                ": 0a\n(echo ran)\n#knotless-nd".len()
            ),
        ] {
            let mut argv = channel_argv();
            argv.splice(0..1, shell.iter().map(|s| s.to_string()));
            let mut child = tokio::process::Command::new(&argv[0])
                .args(&argv[1..])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let mut stdin = child.stdin.take().unwrap();
            stdin.write_all(sent.as_bytes()).await.unwrap();
            drop(stdin);
            let mut out = String::new();
            child
                .stdout
                .take()
                .unwrap()
                .read_to_string(&mut out)
                .await
                .unwrap();
            assert_eq!(out, "", "{shell:?}: {sent:?} ran");
            assert!(child.wait().await.unwrap().success());
        }
    }
}

#[tokio::test]
async fn any_argv_reaches_its_command_as_it_is() {
    for shell in shells() {
        let dir = tempfile::tempdir().unwrap();
        let host = HostChannel::new(&shell, &[]);
        let channel = StepChannel::new(host.clone());
        let exec = HostExec::new(&shell, &[]);
        let odd = "it's \"$HOME\" `x` \\ \n second line; #not a comment";
        let script = format!("printf '%s' '{}'", odd.replace('\'', r"'\''"));
        let (end, text, (out, _)) = through(&channel, &exec, dir.path(), "odd", &script).await;
        assert_eq!(end, StepEnd::Exited(0), "{shell:?}: {text}");
        assert_eq!(out, odd, "{shell:?}");
    }
}

#[tokio::test]
async fn a_dropped_channel_ends_the_task_that_carries_its_streams() {
    let (held, gone) = tokio::sync::oneshot::channel::<()>();
    let pump = tokio::spawn(async move {
        // A stream a leftover process holds open: it never ends by itself.
        let _held = held;
        std::future::pending::<()>().await;
    });
    let io = ChannelIo {
        stdin: Box::new(tokio::io::sink()),
        stdout: Box::new(tokio::io::empty()),
        stderr: Box::new(tokio::io::empty()),
        pump: Some(pump),
    };
    drop(io);
    assert!(gone.await.is_err(), "the pump was dropped, not kept");
}

#[tokio::test]
async fn a_file_a_step_names_as_a_pattern_removes_nothing_of_a_later_step() {
    for shell in shells() {
        for host in [
            HostChannel::new(&shell, &[]),
            HostChannel::without_copier(&shell),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let channel = StepChannel::new(host);
            let exec = HostExec::new(&shell, &[]);
            // As a pattern, the name matches the next step's pid file,
            // which a follow after a cut needs: the next start removes the
            // files of the steps before, this one among them.
            let plant = format!("touch '{}/stepio-s?.pid'", dir.path().display());
            let (end, text, _) = through(&channel, &exec, dir.path(), "s1", &plant).await;
            assert_eq!(end, StepEnd::Exited(0), "{shell:?}: {text}");
            let (end, text, _) = through(&channel, &exec, dir.path(), "s2", "echo two").await;
            assert_eq!(end, StepEnd::Exited(0), "{shell:?}: {text}");
            assert!(
                dir.path().join("stepio-s2.pid").exists(),
                "{shell:?}: the pid file went"
            );
            assert!(
                !dir.path().join("stepio-s?.pid").exists(),
                "{shell:?}: the planted file stayed"
            );
        }
    }
}
