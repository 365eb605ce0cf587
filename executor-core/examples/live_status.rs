//! Embeds the run driver with an event sink of its own and prints each
//! step's status as it changes: what a runner that publishes a check
//! record while the run goes does with the events.
//!
//! ```text
//! cargo run -p executor-core --example live_status
//! ```
//!
//! The run uses the shell executor in a temporary folder: a step installs
//! a tool, the next uses it, the last fails.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use executor_core::events::{Event, EventSink, OutputStream};
use executor_core::{run_with, DriverOptions, RunLog, RunSpec, Step, StepStatus};
use executor_shell::ShellExecutor;
use tokio_util::sync::CancellationToken;

/// Prints a status line per step change, and the step's output line by
/// line (output comes in pieces that may end anywhere).
#[derive(Default)]
struct LiveStatus {
    partial: Mutex<HashMap<(String, &'static str), String>>,
}

impl LiveStatus {
    fn print_lines(&self, step: &str, stream: OutputStream, text: &str, end: bool) {
        let mark = match stream {
            OutputStream::Stdout => "out",
            OutputStream::Stderr => "err",
        };
        let mut partial = self.partial.lock().unwrap_or_else(|p| p.into_inner());
        let held = partial.entry((step.to_string(), mark)).or_default();
        held.push_str(text);
        while let Some(end) = held.find('\n') {
            println!("  {step} {mark} | {}", &held[..end]);
            held.drain(..=end);
        }
        if end && !held.is_empty() {
            println!("  {step} {mark} | {held}");
            held.clear();
        }
    }
}

impl EventSink for LiveStatus {
    fn event(&self, event: &Event) {
        match event {
            Event::RunStarted { name, executor, .. } => {
                println!("run {name} started on the {executor} executor")
            }
            Event::StepStarted { step, index, .. } => {
                println!("step {}: {step} running", index + 1)
            }
            Event::Output {
                step: Some(step),
                stream,
                text,
                ..
            } => self.print_lines(step, *stream, text, false),
            Event::StepFinished {
                step,
                status,
                exit_code,
                duration_ms,
                failure,
                ..
            } => {
                for stream in [OutputStream::Stdout, OutputStream::Stderr] {
                    self.print_lines(step, stream, "", true);
                }
                let code = exit_code.map_or_else(|| "no exit code".into(), |c| format!("exit {c}"));
                // An error says why: a lost status, an environment gone.
                let why = failure
                    .as_ref()
                    .filter(|_| *status == StepStatus::Error)
                    .map_or_else(String::new, |f| format!(": {}", f.message));
                println!(
                    "{step}: {} ({code}, {duration_ms} ms){why}",
                    status.as_str()
                );
            }
            Event::RunFinished { result, .. } => {
                println!("run {}: {}", result.name, result.status.as_str())
            }
            _ => {}
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let home = tempfile::tempdir()?;
    let checkout = home.path().join("checkout");
    let outputs = home.path().join("outputs");
    std::fs::create_dir_all(&checkout)?;
    let spec = RunSpec::new("live-demo", "did:plc:example", &checkout, &outputs)
        .step(Step::new(
            "install",
            "mkdir -p bin && printf '#!/bin/sh\\necho the tool ran\\n' > bin/tool && chmod +x bin/tool && echo installed",
        ))
        .step(Step::new("use", "./bin/tool; echo 'a warning' >&2"))
        .step(Step::new("check", "echo checking; exit 3"));

    // The text log is one consumer of the events; this example needs none.
    let log = RunLog::discard();
    log.add_sink(Arc::new(LiveStatus::default()));

    let executor = ShellExecutor::new(home.path().join("runs"));
    let result = run_with(
        &executor,
        &spec,
        &log,
        CancellationToken::new(),
        &DriverOptions::default(),
    )
    .await;
    assert_eq!(result.steps.len(), 3);
    Ok(())
}
