//! Steps that outlive the connection that started them.
//!
//! A container backend starts each step with one exec. Inside the
//! environment the exec's command is only the step's parent: a supervisor
//! in the background runs the step with its output going through `tee`
//! into a record in the state folder (the last 64 MiB of each stream, in
//! pieces; see [`CHUNK`]) and on to the exec while it lasts, and writes
//! the step's exit status to a file when it ends. An engine
//! kills an exec's own process when its client goes away (Docker does,
//! and containerd's CRI may); the supervisor, the step and its output are
//! not that process, so they go on.
//!
//! While nothing breaks this is one exec per step, its output streamed
//! live and its exit code the step's own. When the exec's stream breaks,
//! [`run_step`] opens another exec that sends the output files on from the
//! exact byte already received (on stdout and stderr apart), until the
//! status file is there, then reads the status. Every byte reaches the log
//! once, in order, and the exit code is the step's; bytes no longer kept
//! are counted in the log, never a silent gap. A second cut, or a third,
//! is followed the same way.
//!
//! A stream can end early without an error (Docker's attached stream ends
//! like a whole one when its connection is cut), so the supervisor and
//! every follow end both streams with an end mark ([`end_mark`]) once all
//! output is in them. The runner takes the mark off, and an exec whose
//! streams do not both end with it was cut, whatever its exit code says.
//! The mark carries the exec's status, so a backend need not ask the
//! engine for it ([`ExecEnd::Ended`]), and the exec has ended once both
//! marks are in: the engine's closing of its stream is not waited for.
//! Each exec's marks carry a key of their own ([`end_key`]), so a mark
//! in the step's output is output. They also begin
//! both streams with [`BEGIN_MARK`], with the wrapper's own shell errors
//! sent nowhere: what an engine writes into a stream it could not start
//! is never counted as the step's output.
//!
//! A follow that ends at once with nothing through, again and again, is
//! tried after longer and longer pauses; after 11 the runner kills the
//! step's processes, which can hold every process the environment allows,
//! and follows once more.
//!
//! The scripts are POSIX `sh` with `mkfifo`, `tee`, `dd`, `tail`, `head`,
//! `wc` and `cat`, and Linux's `/proc`: busybox and coreutils both have
//! them. Where it runs, a channel's starts copy and record the step's
//! streams with [`TEE_FILE`], a program of this crate's own, in place of
//! `tee` and `dd` (see [`stage_tee`]), and the channel's shell hands over
//! to [`AGENT_FILE`], which starts steps without a shell of its own (see
//! [`stage_agent`]). Everything in the
//! state folder is in the step's reach, so the runner treats it as
//! untrusted: a status is accepted only as a number from 0 to 255, and
//! the pid the kill reads is checked (see [`executor_core::script::kill_tree`]).
//!
//! ```
//! use executor_container::detached::{Offsets, StepFiles};
//! use executor_core::script::Script;
//! let files = StepFiles::new("/.knotless", "1a2b");
//! let argv = files.start_argv("", Script::File("/.knotless/step-ab.sh"));
//! assert_eq!(argv[..2], ["sh".to_string(), "-c".to_string()]);
//! let again = files.follow_argv(Offsets { stdout: 10, stderr: 0 });
//! assert_eq!(again[4..6], ["10".to_string(), "0".to_string()]);
//! ```

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::AsyncWrite;
use tokio_util::sync::CancellationToken;

use begin_mark::Begun;
pub use begin_mark::BEGIN_MARK;
pub use channel::{
    answer_as_channel, answer_as_dry_channel, channel_argv, channel_argv_as, is_variable_name,
    message_key, native_line, variables_prelude, ChannelExec, ChannelIo, StepChannel, StepChannels,
    CHANNEL,
};
pub use end_mark::{end_key, end_mark};
use end_mark::{EndMarked, Ends};
use executor_core::events::OutputStream;
use executor_core::{ExecutorError, FailureKind, RunLog};

mod agent;
mod begin_mark;
mod channel;
mod end_mark;
mod exec;
mod files;
mod follow;
mod gated;
mod marked;
mod scripts;
mod signed;
mod tee;

pub use agent::{stage_agent, AGENT, AGENT_FILE};
pub use exec::{shown_argv, ExecEnd, StepEnd, StepExec};
pub use files::{marks_its_end, parse_status, parse_status_line, Offsets, StepFiles, OOM_COUNTERS};
use follow::{from_now, gap, killed, paused, reopened, started, status};
pub use gated::GatedStart;
use gated::{ungated, Released};
use marked::{Counted, Marked};
use scripts::GATE;
pub use scripts::{FOLLOW_AGAIN, FOLLOW_GAP_STDERR, FOLLOW_GAP_STDOUT, GATE_OPEN};
use signed::recorded_when_required;
pub use signed::{Signing, StatusKey, StepKey};
pub use tee::{stage_tee, TEE, TEE_FILE};

/// The exit status `follow_argv`'s command exits with when the step's
/// supervisor is gone and left no status: nothing more will come.
pub const FOLLOW_LOST: i32 = 3;

/// How many times in a row a stream may break with nothing through it.
const MAX_IDLE_CUTS: u32 = 10;

/// Half the first pause after a follow that ended at once with nothing
/// through: 50 ms, doubling with each one after, to 800 ms.
const IDLE_PAUSE: Duration = Duration::from_millis(25);

/// A follow that stayed open this long before it broke is not part of a
/// loop of failing reconnects.
const LASTED: Duration = Duration::from_secs(2);

/// The size of one piece of a stream's record. Each piece is one `dd`
/// start in the environment: 8 MiB pieces took 1 GiB through the wrapper
/// in 9.3–9.9 s where 1 MiB pieces took 11.5–11.8 s.
pub const CHUNK: u64 = 8 << 20;

/// How many pieces of each stream are kept at least: 64 MiB. The oldest
/// go two at a time, so at most 10 (80 MiB) are on disk.
pub const KEPT_CHUNKS: u64 = 8;

/// What [`run_step`] needs besides the exec.
#[derive(Debug, Clone, Copy)]
pub struct Follow {
    /// How long a broken stream may take to be followed again: the
    /// reconnect timeout.
    pub reconnect: Duration,
    /// Set when an earlier runner process may have started the step
    /// ([`StepCommand::follow_from`](executor_core::StepCommand::follow_from)):
    /// if the step's pipes are there it is followed on from these
    /// offsets; if not, it is started.
    pub from: Option<Offsets>,
    /// The key the status of the step followed on from `from` must be
    /// signed with, where the runner that started it recorded that it
    /// must ([`Signing::followed`]).
    pub signed: Option<StepKey>,
}

/// Runs a step started by `start` (from [`StepFiles::start_argv`]) to its
/// end, following it after every cut; see the module docs.
///
/// # Errors
/// The first exec's start error as it is (the backend tells a lost
/// environment from a refused call); an exec that could not be opened
/// again within `follow.reconnect`; a log that could not be written.
pub async fn run_step(
    exec: &dyn StepExec,
    files: &StepFiles,
    start: &[String],
    log: &RunLog,
    interrupt: &CancellationToken,
    follow: Follow,
) -> Result<StepEnd, ExecutorError> {
    run_step_released(exec, files, start, None, log, interrupt, follow).await
}

/// [`run_step`] whose start was opened ahead as `gate` (its argv is
/// `start`, from [`StepFiles::gated_start_argv`]): released instead of
/// opened, and followed as any start is.
///
/// # Errors
/// As [`run_step`].
pub async fn run_step_released(
    exec: &dyn StepExec,
    files: &StepFiles,
    start: &[String],
    gate: Option<Box<dyn GatedStart>>,
    log: &RunLog,
    interrupt: &CancellationToken,
    follow: Follow,
) -> Result<StepEnd, ExecutorError> {
    // Whether the first exec is the gate's release: its start may have
    // died at the gate.
    let mut gated = gate.is_some() && follow.from.is_none();
    let gate_key = gate.as_ref().and_then(|gate| gate.status_key());
    let mut status_key = match follow.from {
        None => gate_key.clone(),
        Some(_) => follow.signed.map(StatusKey::followed),
    };
    // Whether the log's mark says the environment signs: put there before
    // the runner could lose a step it matters for (before the release
    // where the channel's agent is known to run, else the moment the
    // agent says so: a first step has no earlier one to forge its
    // status), so that a runner that follows a step on takes only a
    // signed status too. Written once an environment.
    let mut recorded = follow.from.is_some();
    if !recorded && status_key.as_ref().is_some_and(StatusKey::required) {
        log.require_signed_status().await;
        recorded = true;
    }
    let again = gate.as_ref().and_then(|gate| gate.again());
    let released = Released {
        gate: std::sync::Mutex::new(gate),
        exec,
    };
    let mut out = Counted::new(log.writer_for(OutputStream::Stdout));
    let mut err = Counted::new(log.writer_for(OutputStream::Stderr));
    let marked = Marked {
        exec: &released,
        log,
    };
    let first = match follow.from {
        None => {
            let first = marked.exec(start, &mut out, &mut err, interrupt);
            match status_key.as_ref().filter(|_| !recorded) {
                Some(key) => recorded_when_required(first, key, log, &mut recorded).await?,
                None => first.await?,
            }
        }
        Some(from) => match started(exec, files, follow, log, interrupt).await? {
            Some(true) => ExecEnd::Cut("the runner that started it is gone".into()),
            Some(false) if from == Offsets::default() => {
                // It starts now, as it would have: released where it was
                // opened ahead (its status signed with the gate's key),
                // else the shell starts it, which cannot sign.
                gated = released.is_gated();
                status_key = gate_key;
                recorded = false;
                if status_key.as_ref().is_some_and(StatusKey::required) {
                    log.require_signed_status().await;
                    recorded = true;
                }
                marked.exec(start, &mut out, &mut err, interrupt).await?
            }
            // Its log has output of it, yet its files are gone.
            Some(false) => return Ok(StepEnd::Lost(
                "the step's files are gone from the environment, though the log has output of it"
                    .into(),
            )),
            None => return killed(exec, files).await,
        },
    };
    // A start opened ahead whose exec broke may have died at its gate
    // (an idle connection dropped while the step before ran): if the
    // step's pipes are not there, it never started, so it starts now,
    // ungated. A release that got through after all is not run twice:
    // the later start finds the pipes and follows the first.
    let first = match first {
        ExecEnd::Cut(why) if gated => match started(exec, files, follow, log, interrupt).await? {
            Some(true) => ExecEnd::Cut(why),
            Some(false) => match again {
                Some(again) if status_key.as_ref().is_some_and(StatusKey::required) => {
                    *released.gate.lock().unwrap_or_else(|p| p.into_inner()) = Some(again);
                    marked.exec(start, &mut out, &mut err, interrupt).await?
                }
                _ => {
                    // The shell starts it: no status it writes is signed.
                    status_key = None;
                    let plain = ungated(start);
                    marked.exec(&plain, &mut out, &mut err, interrupt).await?
                }
            },
            None => return killed(exec, files).await,
        },
        other => other,
    };
    if !recorded && status_key.as_ref().is_some_and(StatusKey::required) {
        log.require_signed_status().await;
    }
    let why = match first {
        ExecEnd::Exited(code) => return Ok(StepEnd::Exited(code)),
        ExecEnd::Interrupted => return killed(exec, files).await,
        ExecEnd::Cut(why) => why,
        ExecEnd::Ended => "it ended without a status".into(),
    };
    let mut cuts = 0u32;
    let mut idle_cuts = 0u32;
    let mut last = Offsets::default();
    let mut lasted = false;
    let mut starved = false;
    // Bytes of each stream no longer kept when they were asked for (the
    // log has said how many), and those an earlier runner's log has: the
    // offsets go on past them.
    let mut skipped = follow.from.unwrap_or_default();
    let mut why = Some(why);
    loop {
        let from = Offsets {
            stdout: out.count.saturating_add(skipped.stdout),
            stderr: err.count.saturating_add(skipped.stderr),
        };
        if let Some(why) = &why {
            cuts = cuts.saturating_add(1);
            if why == channel::HELD && cuts == 1 {
                // Not an outage: the step started something that outlives it.
                log.line(&format!(
                    "the step's start ended without its end marks (a process the step left holds its output, or its supervisor ended); reading how it ended from the environment (from byte {} of stdout and {} of stderr)",
                    from.stdout, from.stderr
                ));
                tracing::debug!(
                    stdout = from.stdout,
                    stderr = from.stderr,
                    "reading how a held step ended"
                );
            } else {
                log.line(&format!(
                    "the step's stream broke ({why}); following it on from byte {} of stdout and {} of stderr (cut {cuts})",
                    from.stdout, from.stderr
                ));
                // The run log says it; a raw line on stderr would say it twice.
                tracing::debug!(%why, cuts, stdout = from.stdout, stderr = from.stderr, "following a step whose stream broke");
            }
        }
        // A follow that ends again and again at once, with nothing new
        // through it, is not an outage that ends; one that brings output,
        // or lasted (a front that drops silent connections), goes on.
        idle_cuts = if from == last && !lasted {
            idle_cuts.saturating_add(1)
        } else {
            0
        };
        last = from;
        if idle_cuts > MAX_IDLE_CUTS && !starved {
            // Nothing could run in the environment: most often the step
            // (or what it left behind) holds every process the environment
            // allows, and a follow cannot fork. Killing its processes
            // (the kill starts none before it kills) frees them; a step
            // that had ended keeps its status, so how it ended can still
            // be read.
            starved = true;
            idle_cuts = 0;
            log.line(&format!(
                "following the step ended {} times in a row with nothing through: the environment may have no process left for it (the step's processes can hold every one its limit allows); killing the step's processes, then reading how it ended",
                MAX_IDLE_CUTS + 1
            ));
            tracing::warn!(cuts, "killing a step whose environment runs nothing more");
            if let Err(err) = exec.kill(&files.kill_script()).await {
                tracing::warn!(%err, "could not kill the step's processes");
            }
        } else if idle_cuts > MAX_IDLE_CUTS {
            return Err(ExecutorError::LostExitStatus {
                what: "following the step".into(),
                detail: format!(
                    "it ended {idle_cuts} times in a row with nothing through, after {cuts} cuts, and again after its processes were killed"
                ),
            });
        } else if idle_cuts > 0 && !paused(idle_cuts, interrupt).await {
            return killed(exec, files).await;
        }
        let argv = files.follow_argv(from);
        let opened = tokio::time::Instant::now();
        let ended = reopened(
            &marked,
            &argv,
            &mut out,
            &mut err,
            follow.reconnect,
            log,
            interrupt,
        )
        .await?;
        lasted = opened.elapsed() >= LASTED;
        why = None;
        match ended {
            ExecEnd::Exited(0) => {
                return status(exec, files, status_key.as_ref(), follow, log, interrupt).await
            }
            ExecEnd::Exited(FOLLOW_LOST) if starved => {
                return Ok(StepEnd::Lost(
                    "no status after the runner killed the step's processes, as nothing could run in the environment: the step still ran then, or never started"
                        .into(),
                ))
            }
            ExecEnd::Exited(FOLLOW_LOST) => {
                return Ok(StepEnd::Lost(
                    "the step's supervisor ended without writing a status".into(),
                ))
            }
            ExecEnd::Exited(code @ (FOLLOW_GAP_STDOUT | FOLLOW_GAP_STDERR)) => {
                let (stream, name, at) = if code == FOLLOW_GAP_STDOUT {
                    (
                        OutputStream::Stdout,
                        "stdout",
                        from_now(&out, skipped.stdout),
                    )
                } else {
                    (
                        OutputStream::Stderr,
                        "stderr",
                        from_now(&err, skipped.stderr),
                    )
                };
                let lost = gap(exec, files, stream, at, follow, log, interrupt).await?;
                if lost > 0 {
                    log.line(&format!(
                        "{lost} bytes of the step's {name} from byte {at} were no longer kept in the environment (it keeps the last {} MiB of each stream) and are not in this log",
                        (KEPT_CHUNKS * CHUNK) >> 20
                    ));
                    match stream {
                        OutputStream::Stdout => {
                            skipped.stdout = skipped.stdout.saturating_add(lost)
                        }
                        OutputStream::Stderr => {
                            skipped.stderr = skipped.stderr.saturating_add(lost)
                        }
                    }
                }
            }
            // A piece went while it was sent: the count says how much came.
            ExecEnd::Exited(FOLLOW_AGAIN) => {}
            ExecEnd::Exited(code) => {
                return Ok(StepEnd::Lost(format!(
                    "following the step's output failed with exit {code}"
                )))
            }
            ExecEnd::Interrupted => return killed(exec, files).await,
            ExecEnd::Cut(again) => why = Some(again),
            // Marked answers with a code or a cut.
            ExecEnd::Ended => why = Some("it ended without a status".into()),
        }
    }
}

#[cfg(test)]
mod tests;
