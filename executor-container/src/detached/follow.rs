//! What `run_step` does after a cut: probes, pauses, follows, the status
//! read and the kill.

use tokio_util::sync::CancellationToken;

use super::marked::Counted;
use super::*;

/// Waits before the `n`th try in a row (from 1) of an exec that ended at
/// once: 50 ms, doubling to 800 ms. False when the interrupt fired.
pub(super) async fn paused(n: u32, interrupt: &CancellationToken) -> bool {
    let pause = IDLE_PAUSE.saturating_mul(1 << n.min(5));
    tokio::select! {
        _ = tokio::time::sleep(pause) => true,
        _ = interrupt.cancelled() => false,
    }
}

/// Whether an earlier runner started the step (its pipes are there);
/// `None` when the interrupt fired. A probe whose answer was lost is
/// asked again, after a pause that grows: a start on a guess could run
/// the step twice.
pub(super) async fn started(
    exec: &dyn StepExec,
    files: &StepFiles,
    follow: Follow,
    log: &RunLog,
    interrupt: &CancellationToken,
) -> Result<Option<bool>, ExecutorError> {
    for tries in 0..=MAX_IDLE_CUTS {
        if tries > 0 && !paused(tries, interrupt).await {
            return Ok(None);
        }
        let probe = reopened(
            exec,
            &files.started_argv(),
            &mut tokio::io::sink(),
            &mut tokio::io::sink(),
            follow.reconnect,
            log,
            interrupt,
        )
        .await?;
        match probe {
            ExecEnd::Exited(code) => return Ok(Some(code == 0)),
            ExecEnd::Interrupted => return Ok(None),
            ExecEnd::Cut(_) | ExecEnd::Ended => continue,
        }
    }
    Err(ExecutorError::LostExitStatus {
        what: "finding whether the step was started".into(),
        detail: format!("the probe's stream broke {} times", MAX_IDLE_CUTS + 1),
    })
}

/// A stream's offset now: what came, and what was skipped.
pub(super) fn from_now<W>(counted: &Counted<W>, skipped: u64) -> u64 {
    counted.count.saturating_add(skipped)
}

/// How many bytes of `stream` from `at` on are no longer kept: up to the
/// oldest piece still there.
#[allow(clippy::too_many_arguments)]
pub(super) async fn gap(
    exec: &dyn StepExec,
    files: &StepFiles,
    stream: OutputStream,
    at: u64,
    follow: Follow,
    log: &RunLog,
    interrupt: &CancellationToken,
) -> Result<u64, ExecutorError> {
    let mut said = executor_core::text::HeadBuffer::new(32);
    let ended = reopened(
        exec,
        &files.oldest_argv(stream),
        &mut said,
        &mut tokio::io::sink(),
        follow.reconnect,
        log,
        interrupt,
    )
    .await?;
    if ended != ExecEnd::Exited(0) || said.dropped() > 0 {
        return Ok(0);
    }
    // The index is in the step's reach: a number, or no gap.
    let Some(oldest) = said.text().parse::<u64>().ok() else {
        return Ok(0);
    };
    Ok(oldest.saturating_mul(CHUNK).saturating_sub(at))
}

/// Opens an exec again through an outage: tries while its start fails as
/// [`FailureKind::Unreachable`], within `reconnect`, saying so in the log
/// once; the interrupt ends the wait.
#[allow(clippy::too_many_arguments)]
pub(super) async fn reopened(
    exec: &dyn StepExec,
    argv: &[String],
    stdout: &mut (dyn AsyncWrite + Send + Unpin),
    stderr: &mut (dyn AsyncWrite + Send + Unpin),
    reconnect: Duration,
    log: &RunLog,
    interrupt: &CancellationToken,
) -> Result<ExecEnd, ExecutorError> {
    let mut backoff = executor_core::outage::Backoff::new(reconnect);
    let mut said = false;
    loop {
        match exec.exec(argv, stdout, stderr, interrupt).await {
            Err(e) if e.kind() == FailureKind::Unreachable => {
                if !said {
                    said = true;
                    log.line(&format!(
                        "waiting up to {}s for the environment to answer again: {e}",
                        reconnect.as_secs()
                    ));
                }
                tokio::select! {
                    more = backoff.pause() => if !more { return Err(e) },
                    _ = interrupt.cancelled() => return Ok(ExecEnd::Interrupted),
                }
            }
            other => return other,
        }
    }
}

/// Reads the step's status once its output is all in; a read cut short
/// is tried again after a pause that grows, as a follow is.
pub(super) async fn status(
    exec: &dyn StepExec,
    files: &StepFiles,
    key: Option<&StatusKey>,
    follow: Follow,
    log: &RunLog,
    interrupt: &CancellationToken,
) -> Result<StepEnd, ExecutorError> {
    let argv = files.status_argv();
    for tries in 0..=MAX_IDLE_CUTS {
        if tries > 0 && !paused(tries, interrupt).await {
            return killed(exec, files).await;
        }
        let mut text = executor_core::text::HeadBuffer::new(256);
        let ended = reopened(
            exec,
            &argv,
            &mut text,
            &mut tokio::io::sink(),
            follow.reconnect,
            log,
            interrupt,
        )
        .await?;
        match ended {
            ExecEnd::Exited(0) => {
                let said = text.text();
                let raw = String::from_utf8_lossy(text.kept());
                let line = match key {
                    Some(key) => match key.checked(&files.prefix, &raw) {
                        Ok(line) => line,
                        Err(why) => {
                            let lost = format!(
                                "the step's status file holds a status its supervisor did not write ({why}): a process of the step's user may have written it"
                            );
                            log.line(&format!("refusing the step's status: {lost}"));
                            tracing::warn!(%why, "refused a step's status that its supervisor did not sign");
                            return Ok(StepEnd::Lost(lost));
                        }
                    },
                    None => raw.split('\n').next().unwrap_or_default(),
                };
                let parsed = (text.dropped() == 0)
                    .then(|| parse_status_line(line))
                    .flatten();
                return Ok(match parsed {
                    Some((code, usage)) => {
                        if let Some(usage) = usage {
                            log.record_usage(usage);
                        }
                        StepEnd::Exited(code)
                    }
                    None => StepEnd::Lost(format!(
                        "the step's status file holds {:?}, not an exit status",
                        said.chars().take(16).collect::<String>()
                    )),
                });
            }
            ExecEnd::Exited(code) => {
                return Ok(StepEnd::Lost(format!(
                    "reading the step's status failed with exit {code}"
                )))
            }
            ExecEnd::Interrupted => return killed(exec, files).await,
            // A cut while reading a few bytes: read them again.
            ExecEnd::Cut(_) | ExecEnd::Ended => continue,
        }
    }
    Err(ExecutorError::LostExitStatus {
        what: "reading the step's status".into(),
        detail: format!("its stream broke {} times", MAX_IDLE_CUTS + 1),
    })
}

pub(super) async fn killed(
    exec: &dyn StepExec,
    files: &StepFiles,
) -> Result<StepEnd, ExecutorError> {
    if let Err(err) = exec.kill(&files.kill_script()).await {
        tracing::warn!(%err, "could not kill an interrupted step");
    }
    Ok(StepEnd::Interrupted)
}
