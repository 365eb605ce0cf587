//! Command-line flags.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

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
    /// The run's steps, variables and caches as YAML, with GitHub Actions'
    /// step keys (name, run, env, timeout-minutes, continue-on-error,
    /// `if: always()`); `-` for standard input. Its variables and caches
    /// come before --env-file, --env and --cache.
    #[arg(long, value_name = "FILE")]
    pub workflow: Option<PathBuf>,
    /// Host folder that receives OUTPUTS_DIR.
    #[arg(long, default_value = "outputs")]
    pub outputs: PathBuf,
    /// Where the result JSON goes; `-` for standard output (then --log
    /// needs a file: one output on standard output at a time).
    #[arg(long, default_value = "result.json")]
    pub result: PathBuf,
    /// Where the run log goes; `-` for the terminal.
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

/// `CHOWN`, `cap_chown`: the name without `CAP_`, upper case, as both
/// Docker and Kubernetes take it.
fn parse_capability(text: &str) -> Result<String, String> {
    let upper = text.trim().to_ascii_uppercase();
    let name = upper.strip_prefix("CAP_").unwrap_or(&upper);
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
    {
        return Err(format!(
            "{text:?} is not a capability name such as CHOWN or NET_ADMIN"
        ));
    }
    Ok(name.to_string())
}

/// Flags of the k8s executor.
#[derive(Debug, Args, Default, Clone)]
#[command(next_help_heading = "Kubernetes (--executor k8s)")]
pub struct K8sArgs {
    /// Kubeconfig file; default KUBECONFIG, then ~/.kube/config.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context; default the current context.
    #[arg(long)]
    pub context: Option<String>,
    /// Namespace; default the context's, then `default`.
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// Accept a kubeconfig whose cluster sets insecure-skip-tls-verify (the
    /// server's certificate goes unchecked; the log says so). Without this
    /// flag such a kubeconfig is refused.
    #[arg(long)]
    pub insecure_skip_tls_verify: bool,
    /// Accept a kubeconfig whose server is plain http:// (its token, the
    /// run's Secret and the checkout cross the network unencrypted; the
    /// log says so). Without this flag such a kubeconfig is refused.
    #[arg(long)]
    pub insecure_plain_http: bool,
    /// CPU request of the run's pod, e.g. 500m.
    #[arg(long)]
    pub cpu_request: Option<String>,
    /// CPU limit of the run's pod.
    #[arg(long)]
    pub cpu_limit: Option<String>,
    /// Memory request of the run's pod, e.g. 512Mi.
    #[arg(long)]
    pub memory_request: Option<String>,
    /// Memory limit of the run's pod.
    #[arg(long)]
    pub memory_limit: Option<String>,
    /// A node selector entry (repeatable).
    #[arg(long = "node-selector", value_name = "KEY=VALUE", value_parser = parse_pair)]
    pub node_selector: Vec<(String, String)>,
    /// A toleration (repeatable): KEY[=VALUE]:EFFECT, e.g. dedicated=ci:NoSchedule.
    #[arg(long = "toleration", value_name = "KEY[=VALUE]:EFFECT", value_parser = parse_toleration)]
    pub tolerations: Vec<serde_json::Value>,
    /// Service account of the run's pod.
    #[arg(long)]
    pub service_account: Option<String>,
    /// Image pull secret of the run's pod.
    #[arg(long)]
    pub image_pull_secret: Option<String>,
    /// Run the steps as this user id (runAsUser).
    #[arg(long, value_name = "UID")]
    pub run_as_user: Option<i64>,
    /// Run the steps with this group id (runAsGroup).
    #[arg(long, value_name = "GID")]
    pub run_as_group: Option<i64>,
    /// Refuse to start the pod if it would run as root (runAsNonRoot).
    #[arg(long)]
    pub run_as_non_root: bool,
    /// Give the run a node to itself (required pod anti-affinity); on by
    /// default for --trigger pull.
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub isolate: Option<bool>,
    /// How long the pod may take to be ready (renting a node counts).
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    pub pod_timeout: Duration,
    /// How long a call the Kubernetes API server or the Docker engine does
    /// not answer (refused, reset, 429, 5xx) is tried again, backing off,
    /// before it fails; stop and cleanup ride out an outage this long.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub reconnect_timeout: Duration,
    /// Whether the checkout, the steps and caches go into the container or
    /// pod gzip-compressed: auto (when the engine's or API server's round
    /// trip shows a link between machines, 2 ms or more), always, never.
    #[arg(long, default_value = "auto", value_parser = parse_compression)]
    pub compression: executor_core::tar::Compression,
}

fn parse_compression(text: &str) -> Result<executor_core::tar::Compression, String> {
    text.parse()
}

fn parse_pair(text: &str) -> Result<(String, String), String> {
    let (k, v) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not KEY=VALUE"))?;
    if k.is_empty() {
        return Err(format!("{text:?} has an empty key"));
    }
    Ok((k.to_string(), v.to_string()))
}

/// `key[=value]:Effect` as a Kubernetes toleration.
pub fn parse_toleration(text: &str) -> Result<serde_json::Value, String> {
    let (kv, effect) = text.rsplit_once(':').ok_or_else(|| {
        format!("{text:?} is not KEY[=VALUE]:EFFECT (e.g. dedicated=ci:NoSchedule)")
    })?;
    if !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&effect) {
        return Err(format!(
            "toleration effect {effect:?} must be NoSchedule, PreferNoSchedule or NoExecute"
        ));
    }
    Ok(match kv.split_once('=') {
        Some((k, v)) => {
            serde_json::json!({"key": k, "operator": "Equal", "value": v, "effect": effect})
        }
        None => serde_json::json!({"key": kv, "operator": "Exists", "effect": effect}),
    })
}

/// Flags of the docker executor.
#[derive(Debug, Args, Default)]
#[command(next_help_heading = "Docker (--executor docker)")]
pub struct DockerArgs {
    /// Memory limit of the container: bytes, or with k, m, g (512m, 2g).
    #[arg(long, value_parser = parse_bytes)]
    pub memory: Option<i64>,
    /// CPU limit of the container, e.g. 1.5.
    #[arg(long)]
    pub cpus: Option<f64>,
    /// Network of the container (default: the engine's default).
    #[arg(long)]
    pub network: Option<String>,
    /// User the steps run as, e.g. 1000:1000.
    #[arg(long)]
    pub user: Option<String>,
    /// When to pull the image.
    #[arg(long, value_enum, default_value = "missing")]
    pub pull: Pull,
    /// Most processes the container may hold; 0 for the engine's default
    /// (unlimited).
    #[arg(long, default_value_t = executor_docker::DEFAULT_PIDS_LIMIT)]
    pub pids_limit: i64,
    /// A capability dropped from the container (repeatable), e.g. ALL.
    #[arg(long = "cap-drop", value_name = "CAP", value_parser = parse_capability)]
    pub cap_drop: Vec<String>,
    /// A read-only root filesystem: only /work, /steps, /outputs, cache
    /// volumes and a /tmp tmpfs are writable.
    #[arg(long)]
    pub read_only: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum Pull {
    /// Never pull: a missing image is an error.
    Never,
    /// Pull only when the engine lacks the image.
    #[default]
    Missing,
    /// Pull before every run.
    Always,
}

/// The run log's limit of step output: bytes, or none.
#[derive(Debug, Clone, Copy)]
pub struct LogLimit(pub Option<u64>);

fn parse_log_limit(text: &str) -> Result<LogLimit, String> {
    if text.trim().eq_ignore_ascii_case("none") {
        return Ok(LogLimit(None));
    }
    let bytes = parse_bytes(text)?;
    Ok(LogLimit(u64::try_from(bytes).ok()))
}

/// `1048576`, `512k`, `512m`, `2g`.
pub fn parse_bytes(text: &str) -> Result<i64, String> {
    let bad = || format!("{text:?} is not a size: use bytes or a number with k, m or g (512m, 2g)");
    let lower = text.trim().to_ascii_lowercase();
    let lower = lower.strip_suffix('b').unwrap_or(&lower);
    let (digits, scale) = match lower.chars().last() {
        Some('k') => (&lower[..lower.len() - 1], 1i64 << 10),
        Some('m') => (&lower[..lower.len() - 1], 1 << 20),
        Some('g') => (&lower[..lower.len() - 1], 1 << 30),
        _ => (lower, 1),
    };
    let n: i64 = digits.parse().map_err(|_| bad())?;
    n.checked_mul(scale).filter(|v| *v > 0).ok_or_else(bad)
}

/// How `resume` and `cleanup` reach the cluster: `run`'s connection flags.
#[derive(Debug, Args, Default, Clone)]
#[command(next_help_heading = "Kubernetes (--executor k8s)")]
pub struct ReachArgs {
    /// Kubeconfig file; default KUBECONFIG, then ~/.kube/config.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context; default the current context.
    #[arg(long)]
    pub context: Option<String>,
    /// Namespace; default the context's, then `default`.
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// Accept a kubeconfig whose cluster sets insecure-skip-tls-verify.
    #[arg(long)]
    pub insecure_skip_tls_verify: bool,
    /// Accept a kubeconfig whose server is plain http://.
    #[arg(long)]
    pub insecure_plain_http: bool,
    /// How long an engine or API server that does not answer is waited
    /// for (default 5m).
    #[arg(long, value_parser = parse_duration)]
    pub reconnect_timeout: Option<Duration>,
    /// Compress transfers: auto, always or never (default auto).
    #[arg(long, value_parser = parse_compression)]
    pub compression: Option<executor_core::tar::Compression>,
}

impl ReachArgs {
    /// The flags given, over `k8s`.
    pub fn over(&self, k8s: &mut K8sArgs) {
        if self.kubeconfig.is_some() {
            k8s.kubeconfig.clone_from(&self.kubeconfig);
        }
        if self.context.is_some() {
            k8s.context.clone_from(&self.context);
        }
        if self.namespace.is_some() {
            k8s.namespace.clone_from(&self.namespace);
        }
        k8s.insecure_skip_tls_verify |= self.insecure_skip_tls_verify;
        k8s.insecure_plain_http |= self.insecure_plain_http;
        if let Some(t) = self.reconnect_timeout {
            k8s.reconnect_timeout = t;
        }
        if let Some(c) = self.compression {
            k8s.compression = c;
        }
    }
}

/// The k8s flags as `run` has them when none is given.
pub fn k8s_defaults() -> K8sArgs {
    use clap::FromArgMatches;
    let cmd = K8sArgs::augment_args(clap::Command::new("defaults"));
    cmd.try_get_matches_from(["defaults"])
        .ok()
        .and_then(|m| K8sArgs::from_arg_matches(&m).ok())
        .unwrap_or_default()
}

#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// Backend the run is on: docker or k8s (the shell's runs end with
    /// their runner).
    #[arg(long, value_enum)]
    pub executor: ExecutorKind,
    /// The runner's DID, as given to `run`.
    #[arg(long, env = "RUNNER_DID")]
    pub runner: String,
    /// The run's name, as given to `run`.
    #[arg(long)]
    pub name: String,
    /// The run's log file, as given to `run` (with its mark, LOG.mark, and
    /// its record, LOG.run, beside it): the run goes on from where it
    /// ends, and is written on. The rest of what `run` was given is read
    /// from the record; a flag below given here replaces it.
    #[arg(long)]
    pub log: PathBuf,
    /// Host folder that receives OUTPUTS_DIR; default the run's.
    #[arg(long)]
    pub outputs: Option<PathBuf>,
    /// Where the result JSON goes; default the run's.
    #[arg(long)]
    pub result: Option<PathBuf>,
    /// Start every new line of the run log with its time (on when the
    /// run had it).
    #[arg(long)]
    pub timestamps: bool,
    /// The log's output limit; default the run's (its bytes so far count).
    #[arg(long, value_name = "SIZE", value_parser = parse_log_limit)]
    pub log_limit: Option<LogLimit>,
    /// Also write the resumed part's events as JSON lines, after what the
    /// file holds; default the run's `--events` file, `-` for stdout.
    #[arg(long)]
    pub events: Option<String>,
    /// A secret variable to mask, besides those the run named (their
    /// values are read again from the environment).
    #[arg(long = "secret", value_name = "NAME")]
    pub secrets: Vec<String>,
    /// As `--secret`, from a file, besides the run's.
    #[arg(long = "secret-file", value_name = "NAME=PATH", value_parser = crate::secrets::parse_secret_file)]
    pub secret_files: Vec<(String, PathBuf)>,
    /// Host folder of the caches; default the run's.
    #[arg(long, env = "RUNNER_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Largest cache saved back: bytes, or with k, m, g; default the run's.
    #[arg(long, value_parser = parse_bytes)]
    pub cache_max: Option<i64>,
    #[command(flatten)]
    pub reach: ReachArgs,
}

#[derive(Debug, Args)]
pub struct CleanupArgs {
    /// Backend to clean.
    #[arg(long, value_enum, default_value = "shell")]
    pub executor: ExecutorKind,
    /// The runner's DID whose leftovers to remove.
    #[arg(long, env = "RUNNER_DID")]
    pub runner: String,
    /// Remove all of this runner's environments that are not live, not only expired ones.
    #[arg(long)]
    pub force: bool,
    /// Folder for the shell executor's run folders.
    #[arg(long, env = "RUNNER_SHELL_ROOT")]
    pub shell_root: Option<PathBuf>,
    /// Host folder of the caches, as given to `run`; the journal of
    /// environments runs could not remove is beside it.
    #[arg(long, env = "RUNNER_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    #[command(flatten)]
    pub reach: ReachArgs,
}

/// The journal of environments runs could not remove: beside the cache
/// folder (`journal` next to `caches`).
pub fn journal(cache_dir: Option<&std::path::Path>) -> executor_core::journal::Journal {
    let caches = cache_dir.map_or_else(executor_core::CacheStore::default_dir, |d| d.to_path_buf());
    let dir = match caches.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.join("journal"),
        _ => caches.join(".journal"),
    };
    executor_core::journal::Journal::new(dir)
}

/// `90`, `90s`, `15m`, `2h`, `1h30m`; at most [`executor_core::MAX_TIMEOUT`] (30 days).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || {
        format!("{text:?} is not a duration: use seconds (90) or units like 90s, 15m, 2h, 1h30m")
    };
    let too_long = || {
        format!(
            "{text:?} is longer than the most allowed, {} days",
            executor_core::MAX_TIMEOUT.as_secs() / 86400
        )
    };
    let max = executor_core::MAX_TIMEOUT.as_secs();
    let total = if text.bytes().all(|b| b.is_ascii_digit()) && !text.is_empty() {
        text.parse::<u64>().map_err(|_| too_long())?
    } else {
        let mut total = 0u64;
        let mut number = String::new();
        for c in text.chars() {
            if c.is_ascii_digit() {
                number.push(c);
                continue;
            }
            let n: u64 = match number.parse() {
                Ok(n) => n,
                Err(_) if !number.is_empty() => return Err(too_long()),
                Err(_) => return Err(bad()),
            };
            number.clear();
            let unit = match c {
                's' => 1,
                'm' => 60,
                'h' => 3600,
                'd' => 86400,
                _ => return Err(bad()),
            };
            total = n
                .checked_mul(unit)
                .and_then(|secs| total.checked_add(secs))
                .ok_or_else(too_long)?;
        }
        if !number.is_empty() {
            return Err(bad());
        }
        total
    };
    if total == 0 {
        return Err(bad());
    }
    if total > max {
        return Err(too_long());
    }
    Ok(Duration::from_secs(total))
}

fn parse_cache(text: &str) -> Result<executor_core::CacheSpec, String> {
    executor_core::CacheSpec::parse(text).map_err(|e| e.to_string())
}

fn parse_env(text: &str) -> Result<(String, String), String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not KEY=VALUE"))?;
    executor_core::validate_env_key(key).map_err(|e| e.to_string())?;
    Ok((key.to_string(), value.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert!(parse_duration("10x").is_err());
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("m").is_err());
        for huge in [
            "99999999999999999999",
            "99999999999999999999s",
            "999999999999d",
            "31d",
        ] {
            let err = parse_duration(huge).unwrap_err();
            assert!(err.contains("30 days"), "{huge}: {err}");
        }
        assert_eq!(parse_duration("30d"), Ok(Duration::from_secs(30 * 86400)));
        assert_eq!(parse_bytes("512m"), Ok(512 << 20));
        assert_eq!(parse_bytes("2G"), Ok(2 << 30));
        assert_eq!(parse_bytes("100"), Ok(100));
        assert!(parse_bytes("lots").is_err());
        assert_eq!(
            parse_toleration("dedicated=ci:NoSchedule").unwrap()["operator"],
            "Equal"
        );
        assert_eq!(
            parse_toleration("gpu:NoExecute").unwrap()["operator"],
            "Exists"
        );
        assert!(parse_toleration("gpu:Sometimes").is_err());
    }
}
