//! One step as a process group: spawn, drain output, wait, kill.

use std::process::Stdio;
use std::time::Duration;

use executor_core::events::OutputStream;
use executor_core::{CommandOutcome, ExecutorError, RunLog, StepCommand};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// After the shell exits, how long its output pipes may take to reach end
/// of file. A background process the step left running keeps them open;
/// past this its output keeps flowing to the log until stop, but the step
/// is over.
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(1);

/// A finished step and what it left behind.
pub(crate) struct Finished {
    pub outcome: CommandOutcome,
    /// Readers still attached to pipes a background process holds open.
    pub lingering: Vec<JoinHandle<()>>,
    /// What the step's process tree cost, when the kernel could say.
    pub usage: Option<executor_core::usage::StepUsage>,
}

/// The runner's own variables a step gets; nothing else of the runner's
/// environment (`KUBECONFIG`, cloud tokens, `--secret` variables of other
/// runs) reaches a step unless the run passes it.
const PASSED_THROUGH: &[&str] = &[
    "PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "USER", "LOGNAME", "TMPDIR",
];

/// Used when the runner has no `PATH` of its own.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// `sh` by its absolute path, found once in the `PATH` steps get.
///
/// Why: the standard library spawns a program named without a path, in an
/// environment whose `PATH` it was given, by forking the runner and trying
/// `execve` in each `PATH` folder in the child. By path it uses
/// `posix_spawn` (a vfork). `strace -f -c` of 200 `true` steps showed the
/// fork at 0.7 ms a step and eight `execve` calls a step, seven failing.
/// A shell found nowhere is left to that search, as before.
fn shell() -> &'static std::path::Path {
    static SHELL: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    SHELL.get_or_init(|| {
        use std::os::unix::fs::PermissionsExt;
        let path = std::env::var_os("PATH").unwrap_or_else(|| DEFAULT_PATH.into());
        std::env::split_paths(&path)
            .filter(|dir| dir.is_absolute())
            .map(|dir| dir.join("sh"))
            .find(|sh| {
                std::fs::metadata(sh)
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            })
            .unwrap_or_else(|| "sh".into())
    })
}

fn host_env() -> Vec<(String, std::ffi::OsString)> {
    let mut env: Vec<_> = PASSED_THROUGH
        .iter()
        .filter_map(|k| std::env::var_os(k).map(|v| (k.to_string(), v)))
        .collect();
    if !env.iter().any(|(k, _)| k == "PATH") {
        env.push(("PATH".into(), DEFAULT_PATH.into()));
    }
    env
}

/// Runs the step as `sh -ec` in its own process group and records the
/// group in `groups` so stop can kill whatever it leaves behind.
pub(crate) async fn run_step(
    work_dir: &std::path::Path,
    step: &StepCommand,
    script_file: Option<&std::path::Path>,
    log: &RunLog,
    interrupt: CancellationToken,
    on_spawn: impl FnOnce(Pid),
) -> Result<Finished, ExecutorError> {
    let [sh, flag, script] = step.argv();
    // From its file, a script of any size; in the command line, at most 128 KiB.
    let (flag, script) = match script_file {
        Some(file) => ("-e", file.as_os_str()),
        None => (flag, std::ffi::OsStr::new(script)),
    };
    let mut child = Command::new(shell())
        .arg0(sh)
        .arg(flag)
        .arg(script)
        .current_dir(work_dir)
        .env_clear()
        .envs(host_env())
        .envs(step.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| ExecutorError::io("starting sh", work_dir, e))?;
    let pgid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw)
        .ok_or_else(|| {
            ExecutorError::backend("starting sh", "the shell exited before it had a pid")
        })?;
    on_spawn(pgid);

    let mut drains = Vec::new();
    if let Some(out) = child.stdout.take() {
        drains.push(tokio::spawn(drain(out, OutputStream::Stdout, log.clone())));
    }
    if let Some(err) = child.stderr.take() {
        drains.push(tokio::spawn(drain(err, OutputStream::Stderr, log.clone())));
    }

    // The step's cost is read while its shell is a zombie, before the
    // wait below reaps it.
    let watched = crate::usage::Watched::new(pgid.as_raw());
    let mut usage = None;
    if let Some(watched) = &watched {
        tokio::select! {
            exited = watched.exited() => usage = exited,
            _ = interrupt.cancelled() => {}
        }
    }
    let status = tokio::select! {
        status = child.wait() => status,
        _ = interrupt.cancelled() => {
            kill_group(pgid);
            // The group is gone; reap the shell so no zombie is left.
            let _ = child.wait().await;
            for d in &drains { d.abort(); }
            return Ok(Finished { outcome: CommandOutcome::Interrupted, lingering: Vec::new(), usage: None });
        }
    };
    let status = status.map_err(|e| ExecutorError::LostExitStatus {
        what: format!("step {}", step.name),
        detail: e.to_string(),
    })?;

    let mut lingering = Vec::new();
    let deadline = tokio::time::Instant::now() + DRAIN_AFTER_EXIT;
    for mut d in drains {
        if tokio::time::timeout_at(deadline, &mut d).await.is_err() {
            lingering.push(d);
        }
    }
    if !lingering.is_empty() {
        tracing::debug!(step = %step.name, "a background process still holds the step's output open");
    }

    use std::os::unix::process::ExitStatusExt;
    let outcome = match (status.code(), status.signal()) {
        (Some(code), _) => CommandOutcome::exited(code),
        (None, Some(signal)) => CommandOutcome::Exited {
            code: 128 + signal,
            reason: Some(format!("killed by signal {signal}")),
        },
        (None, None) => {
            return Err(ExecutorError::LostExitStatus {
                what: format!("step {}", step.name),
                detail: format!("wait returned {status:?} with neither code nor signal"),
            })
        }
    };
    Ok(Finished {
        outcome,
        lingering,
        usage,
    })
}

async fn drain(mut from: impl AsyncRead + Unpin, stream: OutputStream, log: RunLog) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) => return,
            Ok(n) => log.output_from(stream, &buf[..n]).await,
            Err(err) => {
                tracing::warn!(%err, "reading step output failed");
                return;
            }
        }
    }
}

/// Kills every process of a group; a group that is already gone is fine.
pub(crate) fn kill_group(pgid: Pid) {
    match killpg(pgid, Signal::SIGKILL) {
        Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
        Err(err) => tracing::warn!(%err, pgid = pgid.as_raw(), "killing a step's processes failed"),
    }
}
