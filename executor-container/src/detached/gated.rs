//! Starts opened ahead of their time and released by one message: the
//! trait a backend's gated start implements, and the exec a step's first
//! start goes through when it has one.

use super::*;

/// `argv` of a gated start, without its gate: the same start, opened now.
pub(super) fn ungated(argv: &[String]) -> Vec<String> {
    let mut plain = argv.to_vec();
    if let Some(script) = plain.get_mut(2) {
        if let Some(rest) = script.strip_prefix(GATE).and_then(|s| s.strip_prefix('\n')) {
            *script = rest.to_string();
        }
    }
    plain
}

/// A start opened ahead ([`StepFiles::gated_start_argv`]), waiting at its
/// gate. Dropped unreleased, it must let the exec's stdin close, so that
/// the exec ends having started nothing.
#[async_trait]
pub trait GatedStart: Send {
    /// Sends [`GATE_OPEN`] and then is what [`StepExec::exec`] would have
    /// been for its argv: its output into the writers until it ends or
    /// `interrupt` fires.
    ///
    /// # Errors
    /// As [`StepExec::exec`]; an exec whose gate could not be written to
    /// ends as [`ExecEnd::Cut`], not an error: it may have started.
    async fn release(
        self: Box<Self>,
        stdout: &mut (dyn AsyncWrite + Send + Unpin),
        stderr: &mut (dyn AsyncWrite + Send + Unpin),
        interrupt: &CancellationToken,
    ) -> Result<ExecEnd, ExecutorError>;

    /// The key this start's status file is signed with, where its
    /// environment signs one ([`StatusKey`]): a status read back after a
    /// cut is then checked against it. `None` (the default): a start
    /// whose status cannot be signed.
    fn status_key(&self) -> Option<StatusKey> {
        None
    }

    /// The same start, to be released once more where one whose status
    /// must be signed ([`StatusKey::required`]) started nothing: an exec
    /// of the step's own, the other way to try again, starts it with the
    /// shell, which cannot sign it (a process an earlier step left could
    /// end the channel to force that). `None` (the default): the step's
    /// own exec is the way to try again.
    fn again(&self) -> Option<Box<dyn GatedStart>> {
        None
    }
}

/// The first exec of a step that was opened ahead: its release, then the
/// exec as usual for whatever follows.
pub(super) struct Released<'a> {
    pub(super) gate: std::sync::Mutex<Option<Box<dyn GatedStart>>>,
    pub(super) exec: &'a dyn StepExec,
}

impl Released<'_> {
    /// Whether its next exec is the gate's release.
    pub(super) fn is_gated(&self) -> bool {
        self.gate
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }
}

#[async_trait]
impl StepExec for Released<'_> {
    async fn exec(
        &self,
        argv: &[String],
        stdout: &mut (dyn AsyncWrite + Send + Unpin),
        stderr: &mut (dyn AsyncWrite + Send + Unpin),
        interrupt: &CancellationToken,
    ) -> Result<ExecEnd, ExecutorError> {
        let gate = self.gate.lock().unwrap_or_else(|p| p.into_inner()).take();
        match gate {
            Some(gate) => gate.release(stdout, stderr, interrupt).await,
            None => self.exec.exec(argv, stdout, stderr, interrupt).await,
        }
    }

    async fn kill(&self, script: &str) -> Result<(), ExecutorError> {
        self.exec.kill(script).await
    }
}
