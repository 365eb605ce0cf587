//! Command-line flags.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

mod again;
mod backend;
mod values;

pub use again::{journal, k8s_defaults, CleanupArgs, ResumeArgs};
pub use backend::{DockerArgs, K8sArgs, Pull};
pub use values::{parse_bytes, parse_duration, LogLimit};
use values::{parse_cache, parse_capability, parse_env, parse_log_limit};

/// The crate's version and the commit it was built from.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("KNOTLESS_COMMIT"),
    ")"
);

/// What `run` and `resume` exit with, shown under their `--help`.
const EXIT_CODES: &str = "Exit codes: 0 success, 1 a step failed, 2 usage or input error, \
3 infrastructure error (engine or cluster unreachable, environment lost), 124 timeout, 130 cancelled.";

/// Run CI runs on the shell, Docker or Kubernetes executor.
///
/// Exit codes: 0 success, 1 a step failed, 2 usage or input error,
/// 3 infrastructure error, 124 timeout, 130 cancelled.
#[derive(Debug, Parser)]
#[command(name = "runner-cli", version = VERSION, about, long_about = None, after_help = EXIT_CODES)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a checkout's steps in one environment and write the result JSON.
    #[command(after_help = EXIT_CODES)]
    Run(Box<RunArgs>),
    /// Remove environments that earlier runs of a runner left behind.
    #[command(
        after_help = "Exit codes: 0 done, 2 usage or input error, 3 infrastructure error (engine or cluster unreachable)."
    )]
    Cleanup(Box<CleanupArgs>),
    /// Carry on a run whose runner was killed: follow the running step
    /// from where the run's log ends, run the steps after it, bring the
    /// outputs back, stop the environment and write the result (docker,
    /// k8s).
    #[command(after_help = EXIT_CODES)]
    Resume(Box<ResumeArgs>),
    /// Print a completion script for a shell, e.g.
    /// `runner-cli completions bash > ~/.local/share/bash-completion/completions/runner-cli`.
    Completions {
        /// The shell: bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExecutorKind {
    /// Local processes in a private run folder (trusted code only).
    Shell,
    /// One container per run on a Docker-compatible engine.
    Docker,
    /// One Kubernetes Job per run.
    K8s,
}

impl ExecutorKind {
    pub fn name(self) -> &'static str {
        match self {
            ExecutorKind::Shell => "shell",
            ExecutorKind::Docker => "docker",
            ExecutorKind::K8s => "k8s",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Trigger {
    /// A push to a branch of the repository.
    Push,
    /// A pull request: untrusted code.
    Pull,
    /// A job taken from a shared queue: untrusted code.
    Queue,
    /// Started by hand.
    Manual,
}

impl Trigger {
    pub fn is_untrusted(self) -> bool {
        matches!(self, Trigger::Pull | Trigger::Queue)
    }
}

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("plan").required(true).args(["steps_file", "workflow"]))]
pub struct RunArgs {
    /// Backend to run on: shell (the steps run on this host, as this
    /// user), docker or k8s. Required: a forgotten flag must not run the
    /// steps on the host.
    #[arg(long, value_enum)]
    pub executor: ExecutorKind,
    /// Run name, used in labels and the result.
    #[arg(long)]
    pub name: String,
    /// The runner's DID, e.g. did:plc:runner.
    #[arg(long, env = "RUNNER_DID")]
    pub runner: String,
    /// Container image (docker, k8s).
    #[arg(long)]
    pub image: Option<String>,
    /// The checkout folder, streamed into WORK_DIR.
    #[arg(long, default_value = ".")]
    pub workdir: PathBuf,
    /// Shared step files, streamed into STEPS_DIR.
    #[arg(long)]
    pub steps_dir: Option<PathBuf>,
    /// Steps as TSV: `name<TAB>script` a line; `-` for standard input.
    #[arg(long, value_name = "FILE")]
    pub steps_file: Option<PathBuf>,
    /// The run's steps, variables and caches as YAML: this runner's flat
    /// form or a GitHub Actions workflow of `run:` steps (docs/running.md
    /// lists what is taken); `-` for standard input. Its variables and
    /// caches come before --env-file, --env and --cache; --image and
    /// --timeout win over its container: and timeout-minutes.
    #[arg(long, value_name = "FILE")]
    pub workflow: Option<PathBuf>,
    /// The job of --workflow to run, when its file has several under
    /// `jobs:`.
    #[arg(long, value_name = "NAME", requires = "workflow")]
    pub job: Option<String>,
    /// Host folder that receives OUTPUTS_DIR.
    #[arg(long, default_value = "outputs")]
    pub outputs: PathBuf,
    /// Most bytes the outputs may unpack to on the host: bytes, or with
    /// k, m, g. A step's outputs past it (a gzip bomb among them) are
    /// refused as they grow, and the run fails naming the limit.
    #[arg(long, value_name = "SIZE", default_value = "10g", value_parser = parse_bytes)]
    pub outputs_max: i64,
    /// Where the result JSON goes; `-` for standard output (then --log
    /// needs a file: one output on standard output at a time). A regular
    /// file is replaced whole (a reader never sees half); its folder must
    /// exist and be writable. Anything else (a device, a FIFO being read,
    /// a socket, /dev/stdout) is written into and left as it was; so with
    /// --log and --events.
    #[arg(long, default_value = "result.json")]
    pub result: PathBuf,
    /// Where the run log goes; `-` for the terminal. A regular file gets
    /// its run's mark, lock and record beside it (LOG.mark, LOG.lock,
    /// LOG.run), so the run can be resumed; a log that is not a regular
    /// file (a device, a FIFO) gets nothing beside it and cannot be.
    #[arg(long, default_value = "-")]
    pub log: String,
    /// Also write the run's events as JSON lines (step started, output,
    /// step finished, ..., the result) to this file; `-` for the terminal.
    #[arg(long, value_name = "FILE")]
    pub events: Option<String>,
    /// Start every line of the run log with its time (UTC, RFC 3339).
    #[arg(long)]
    pub timestamps: bool,
    /// Most step output the run log (and --events) holds: 64m, 1g, or
    /// `none`. Past it, output is dropped and counted, and the steps go on.
    #[arg(long, value_name = "SIZE", default_value = "64m", value_parser = parse_log_limit)]
    pub log_limit: LogLimit,
    /// Limit of the whole run: 90, 90s, 15m, 2h.
    #[arg(long, default_value = "1h", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Limit of each step; defaults to the run timeout.
    #[arg(long, value_parser = parse_duration)]
    pub step_timeout: Option<Duration>,
    /// Run again from the start in a fresh environment, at most N more
    /// times, when the run fails for a reason a fresh attempt can fix (the
    /// environment lost or evicted, the engine or cluster unreachable, an
    /// image pull that failed transiently); never after a step failure,
    /// timeout, cancellation, OOM kill or input error. The run timeout
    /// covers every attempt.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=10))]
    pub retry: u32,
    /// A variable for every step (repeatable).
    #[arg(long = "env", value_name = "KEY=VALUE", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// Plain variables from a file, as `docker run --env-file` reads it
    /// (repeatable; `--env` comes after and wins).
    #[arg(long = "env-file", value_name = "PATH")]
    pub env_files: Vec<PathBuf>,
    /// A secret variable for every step, its value read from the runner's
    /// own environment variable NAME (repeatable). Never NAME=VALUE: a
    /// value on the command line is readable by every local user.
    /// Masked in the log, the result and the dry-run.
    #[arg(long = "secret", value_name = "NAME")]
    pub secrets: Vec<String>,
    /// A secret variable whose value is the file's content, one trailing
    /// newline removed (repeatable).
    #[arg(long = "secret-file", value_name = "NAME=PATH", value_parser = crate::secrets::parse_secret_file)]
    pub secret_files: Vec<(String, PathBuf)>,
    /// What started the run; pull and queue mean untrusted code.
    #[arg(long, value_enum, default_value = "manual")]
    pub trigger: Trigger,
    /// Print the environment and every call the run would make, and touch nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// A cache KEY=PATH (repeatable): restored into PATH before the first
    /// step, saved back after the last one succeeds. PATH is absolute, or
    /// relative to WORK_DIR (the shell executor takes only relative ones).
    #[arg(long = "cache", value_name = "KEY=PATH", value_parser = parse_cache)]
    pub caches: Vec<executor_core::CacheSpec>,
    /// Host folder of the caches; default ~/.cache/knotless-runner/caches.
    #[arg(long, env = "RUNNER_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Largest cache saved back: bytes, or with k, m, g.
    #[arg(long, default_value = "10g", value_parser = parse_bytes)]
    pub cache_max: i64,
    /// Skip removing this runner's expired leftovers before the run.
    #[arg(long)]
    pub no_cleanup: bool,
    /// Folder for the shell executor's run folders.
    #[arg(
        long,
        env = "RUNNER_SHELL_ROOT",
        help_heading = "Shell (--executor shell)"
    )]
    pub shell_root: Option<PathBuf>,
    /// A capability added to the environment (repeatable; docker, k8s),
    /// e.g. CHOWN, SETUID and SETGID for a step that installs packages as
    /// root on k8s, where the step container drops every capability.
    #[arg(long = "cap-add", value_name = "CAP", value_parser = parse_capability)]
    pub cap_add: Vec<String>,
    /// A service container beside the steps (repeatable; docker, k8s):
    /// steps reach it by NAME, and the first step starts once it is ready.
    #[arg(long = "service", value_name = "NAME=IMAGE", value_parser = crate::services::parse_named, help_heading = "Services (docker, k8s)")]
    pub services: Vec<(String, String)>,
    /// The service's command, run as `sh -ec SCRIPT` in place of its
    /// image's own (repeatable).
    #[arg(long = "service-command", value_name = "NAME=SCRIPT", value_parser = crate::services::parse_named, help_heading = "Services (docker, k8s)")]
    pub service_commands: Vec<(String, String)>,
    /// A variable of the service (repeatable).
    #[arg(long = "service-env", value_name = "NAME:KEY=VALUE", value_parser = crate::services::parse_env, help_heading = "Services (docker, k8s)")]
    pub service_env: Vec<(String, (String, String))>,
    /// When the service is ready: tcp:PORT (something listens on the
    /// port) or exec:SCRIPT (the script exits 0 in its container);
    /// without it, once it runs.
    #[arg(long = "service-ready", value_name = "NAME=CHECK", value_parser = crate::services::parse_ready, help_heading = "Services (docker, k8s)")]
    pub service_ready: Vec<(String, executor_core::Readiness)>,
    /// Limit of each service's start and readiness; default 2m.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help_heading = "Services (docker, k8s)")]
    pub service_timeout: Option<Duration>,
    #[command(flatten)]
    pub docker: DockerArgs,
    #[command(flatten)]
    pub k8s: K8sArgs,
}
