//! The core of a pluggable executor framework for CI runners.
//!
//! A CI run is a checkout plus a list of steps. An [`Executor`] gives the
//! run one long-lived environment; [`run`] drives any executor through the
//! run's life (start, each step, outputs, stop) with timeouts and
//! cancellation, and returns a [`RunResult`] ready to be written as JSON.
//!
//! ```no_run
//! # async fn demo(executor: &dyn executor_core::Executor) -> Result<(), Box<dyn std::error::Error>> {
//! use executor_core::{read_steps_file, run, RunLog, RunSpec};
//! use tokio_util::sync::CancellationToken;
//!
//! let mut spec = RunSpec::new("build-1", "did:plc:runner", "./checkout", "./outputs");
//! spec.steps = read_steps_file("steps.tsv".as_ref())?;
//! let result = run(executor, &spec, &RunLog::stdout(), CancellationToken::new()).await;
//! result.write_to("result.json".as_ref())?;
//! # Ok(()) }
//! ```
#![warn(missing_docs)]
// Every public function that can fail says how: embedders match on it.
#![warn(clippy::missing_errors_doc)]

pub mod cache;
pub mod destination;
mod driver;
mod error;
pub mod events;
mod executor;
pub mod expr;
pub mod failure;
pub mod journal;
pub mod labels;
mod log;
pub mod mask;
mod model;
pub mod outage;
mod result;
pub mod resume;
pub mod script;
pub mod service;
mod steps_file;
pub mod tar;
pub mod text;
pub mod usage;

pub use cache::{CacheResult, CacheSpec, CacheStore, Trust};
pub use driver::{run, run_with, DriverOptions, DEFAULT_GRACE};
pub use error::ExecutorError;
#[cfg(feature = "mock")]
pub use executor::MockExecutor;
pub use executor::{
    CleanupReport, CleanupScope, CommandOutcome, Executor, Offsets, RunHandle, StepCommand,
};
pub use failure::{Failure, FailureKind, RetryPolicy};
pub use log::{MemoryLog, Reword, RunLog, DEFAULT_OUTPUT_LIMIT};
pub use mask::{Masker, Secret};
pub use model::{
    validate_env_key, RunSpec, Step, DEFAULT_OUTPUTS_TIMEOUT, DEFAULT_RUN_TIMEOUT,
    DEFAULT_STEP_TIMEOUT, MAX_TIMEOUT, STEP_OUTPUTS_FOLDER,
};
pub use result::{
    manifest, media_type, Attempt, EnvironmentFacts, OutputFile, Phases, RunResult, RunStatus,
    StepIsolation, StepResult, StepStatus, RESULT_SCHEMA,
};
pub use service::{Readiness, Service};
pub use steps_file::{parse_steps, read_steps_file, StepsFileError};
