//! The workflow file (`--workflow FILE`): a run's steps, variables,
//! services and caches in YAML, in this runner's flat form or as a GitHub
//! Actions workflow file of `run:` steps.
//!
//! ```yaml
//! name: ci
//! on: [push]
//! jobs:
//!   test:
//!     runs-on: ubuntu-latest        # read, and said to be ignored
//!     container: rust:1.80
//!     env:
//!       CARGO_TERM_COLOR: never
//!     services:
//!       db:
//!         image: postgres:16
//!         env:
//!           POSTGRES_PASSWORD: test
//!         options: --health-cmd "pg_isready -U postgres"
//!     steps:
//!       - id: version
//!         run: echo "number=$(cat VERSION)" >> "$GITHUB_OUTPUT"
//!       - name: build
//!         run: cargo build --release
//!         env:
//!           VERSION: ${{ steps.version.outputs.number }}
//!       - name: notify
//!         if: failure()
//!         run: echo "build ${{ steps.version.outputs.number }} failed"
//! ```
//!
//! A `${{ }}` in a `run:` script becomes a reference the shell expands
//! (`${NAME}`), never text pasted into the script, so a value can never
//! become code. Unknown keys are refused with their line, and every
//! construct not taken is refused with its line and column.

mod build;
mod file;
mod place;
mod script;
mod service;
#[cfg(test)]
mod tests;
mod variables;

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use executor_core::{CacheSpec, Step};

/// What a workflow file gives a run.
#[derive(Debug, Default)]
pub struct Workflow {
    /// Variables for every step, in the file's order.
    pub env: Vec<(String, String)>,
    /// Caches restored before the first step and saved after the last.
    pub caches: Vec<CacheSpec>,
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// Service containers beside the steps.
    pub services: Vec<executor_core::Service>,
    /// The job's `container:` image.
    pub image: Option<String>,
    /// The job's `timeout-minutes`.
    pub timeout: Option<Duration>,
    /// Variables whose value is exactly one secret (`TOKEN: ${{
    /// secrets.DEPLOY }}`): secrets of their own, `(name, secret)`.
    pub secret_aliases: Vec<(String, String)>,
    /// Secrets the file reads, each with where: `(name, where)`.
    pub secrets: Vec<(String, String)>,
    /// What the file says that this runner reads and does not follow
    /// (`runs-on:`), for the run's first lines.
    pub notes: Vec<String>,
    /// The job's `container: options:` as this runner's own flags.
    pub container_flags: Vec<String>,
}

/// Reads the workflow file at `path`; `-` is standard input, read by
/// `stdin` (called at most once). `job` picks one of several jobs;
/// `image` is the run's image, named when a step's shell is missing.
pub fn read(
    path: &Path,
    job: Option<&str>,
    image: Option<&str>,
    stdin: impl FnOnce() -> anyhow::Result<String>,
) -> anyhow::Result<Workflow> {
    let (text, shown) = if path == Path::new("-") {
        (stdin()?, "standard input".to_string())
    } else {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read workflow file {}", path.display()))?;
        (text, path.display().to_string())
    };
    parse(&text, job, image).with_context(|| format!("workflow file {shown}"))
}

/// Parses a workflow file's text; see [`read`].
pub fn parse(text: &str, job: Option<&str>, image: Option<&str>) -> anyhow::Result<Workflow> {
    build::workflow(text, job, image)
}
