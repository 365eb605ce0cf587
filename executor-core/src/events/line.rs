//! The runner line the text log shows for each event.

use super::Event;
use crate::StepStatus;

impl Event {
    /// The runner line the text log shows for this event (after its
    /// `==> `), if it shows one: output is shown as it is, and cache
    /// events follow the lines the cache phase writes itself. A sink that
    /// shows progress somewhere else (a terminal, a chat) can show these.
    ///
    /// ```
    /// use executor_core::events::Event;
    /// assert_eq!(Event::message("pulling busybox").line().as_deref(), Some("pulling busybox"));
    /// ```
    pub fn line(&self) -> Option<String> {
        Some(match self {
            Event::RunStarted {
                name,
                runner,
                executor,
                ..
            } => format!("run {name} on {executor} executor, runner {runner}"),
            Event::EnvironmentReady { start_ms, .. } => {
                format!("environment ready ({})", seconds(*start_ms))
            }
            Event::StepStarted { step, .. } => format!("step {step}: started"),
            Event::StepSkipped { step, .. } => {
                format!("step {step}: skipped after an earlier step failed")
            }
            Event::StepResumed {
                step,
                stdout,
                stderr,
                ..
            } => format!(
                "step {step}: carried on by a new runner, after the {stdout} bytes of stdout and {stderr} of stderr above"
            ),
            Event::StepFinished {
                step,
                status,
                exit_code,
                duration_ms,
                output_dropped_bytes,
                usage,
                failure,
                ..
            } => {
                let code = exit_code.map_or_else(|| "no exit code".into(), |c| format!("exit {c}"));
                let dropped = match output_dropped_bytes {
                    0 => String::new(),
                    n => format!(", {} of output dropped", crate::text::size(*n)),
                };
                let cost = usage.map(|u| format!(", {}", u.summary())).unwrap_or_default();
                // An error has no code to tell what happened: its reason does.
                let why = match (status, failure) {
                    (StepStatus::Error, Some(failure)) => {
                        // The result's message names the step; this line
                        // already does.
                        let prefix = format!("step {step}: ");
                        let message = failure.message.strip_prefix(&prefix);
                        let message = message.unwrap_or(&failure.message);
                        format!(": {}", crate::text::one_line(message, 300))
                    }
                    _ => String::new(),
                };
                format!(
                    "step {step}: {} ({code}, {}{cost}{dropped}){why}",
                    status.as_str(),
                    seconds(*duration_ms)
                )
            }
            Event::OutputsCollected {
                ms, failure: None, ..
            } => format!("outputs collected ({})", seconds(*ms)),
            Event::Message { text, .. } => text.clone(),
            Event::RunFinished { result, .. } => {
                format!("run {}: {}", result.name, result.status.as_str())
            }
            Event::OutputsCollected { .. }
            | Event::Output { .. }
            | Event::CacheRestored { .. }
            | Event::CacheSaved { .. }
            | Event::AttemptFinished { .. } => return None,
        })
    }
}

fn seconds(ms: u64) -> String {
    format!("{}.{:03}s", ms / 1000, ms % 1000)
}
