//! The writers an exec's output goes through: one that counts, and the
//! exec whose streams begin and end with marks.

use super::*;

/// A writer that counts the bytes it took.
pub(super) struct Counted<W> {
    inner: W,
    pub(super) count: u64,
}

impl<W> Counted<W> {
    pub(super) fn new(inner: W) -> Self {
        Counted { inner, count: 0 }
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Counted<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = polled {
            self.count = self.count.saturating_add(n as u64);
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A step's execs (starts and follows), whose output counts from
/// [`BEGIN_MARK`](super::BEGIN_MARK) on and whose end counts only when both streams end with
/// an end mark; the marks are taken off before the log, and the status
/// they carry is the exec's code. The exec has ended once both streams
/// hold their mark: it is dropped then, the engine's end of it not
/// waited for. A stream cut short that ended like a
/// whole one (Docker's attached stream does) is a cut, whatever code the
/// exec ended with; so is an exec whose command never began, and what the
/// environment said instead is told in the log.
pub(super) struct Marked<'a> {
    pub(super) exec: &'a dyn StepExec,
    pub(super) log: &'a RunLog,
}

#[async_trait]
impl StepExec for Marked<'_> {
    async fn exec(
        &self,
        argv: &[String],
        stdout: &mut (dyn AsyncWrite + Send + Unpin),
        stderr: &mut (dyn AsyncWrite + Send + Unpin),
        interrupt: &CancellationToken,
    ) -> Result<ExecEnd, ExecutorError> {
        let key = end_key(argv).unwrap_or_default();
        let ends = Ends::default();
        let mut out = Begun::new(EndMarked::new(stdout, key, &ends, 0));
        let mut err = Begun::new(EndMarked::new(stderr, key, &ends, 1));
        // Both marks are the end: the engine's closing of the stream after
        // them is not waited for.
        let ended = tokio::select! {
            biased;
            ended = self.exec.exec(argv, &mut out, &mut err, interrupt) => ended,
            () = ends.both() => Ok(ExecEnd::Ended),
        };
        let written =
            |e: std::io::Error| ExecutorError::backend("writing the step's output", e.to_string());
        let out = out.finish().await.map_err(written)?;
        let err = err.finish().await.map_err(written)?;
        for said in [&out.before, &err.before] {
            if !said.is_empty() {
                self.log.line(&format!(
                    "the environment answered, before the step's command began: {said}"
                ));
            }
        }
        let begun = out.begun && err.begun;
        let out = out.inner.finish().await.map_err(written)?;
        let err = err.inner.finish().await.map_err(written)?;
        let said = |ended: &ExecEnd| match ended {
            ExecEnd::Exited(code) => format!("it ended (exit {code})"),
            _ => "its stream ended".to_string(),
        };
        Ok(match (ended?, out, err) {
            (ended @ (ExecEnd::Exited(_) | ExecEnd::Ended), ..) if !begun => {
                ExecEnd::Cut(format!("{} before its command began", said(&ended)))
            }
            // The marks, not the engine, say how it ended: an engine that
            // killed the exec's own process after them would say otherwise.
            (ExecEnd::Exited(_) | ExecEnd::Ended, Some((out, usage)), Some((err, _)))
                if out == err =>
            {
                if let Some(usage) = usage {
                    self.log.record_usage(usage);
                }
                ExecEnd::Exited(i32::from(out))
            }
            (ExecEnd::Exited(_) | ExecEnd::Ended, Some((out, _)), Some((err, _))) => ExecEnd::Cut(
                format!("its streams' end marks disagree (status {out} and {err})"),
            ),
            (ended @ (ExecEnd::Exited(_) | ExecEnd::Ended), ..) => ExecEnd::Cut(format!(
                "{} before the mark that ends a whole stream",
                said(&ended)
            )),
            (other, ..) => other,
        })
    }

    async fn kill(&self, script: &str) -> Result<(), ExecutorError> {
        self.exec.kill(script).await
    }
}
