//! The flags of `resume` and `cleanup`: the run again, and its leftovers.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::backend::{parse_compression, K8sArgs};
use super::values::{parse_bytes, parse_duration, parse_log_limit, LogLimit};
use super::ExecutorKind;

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
        k8s.insecure_skip_tls_verify = self.insecure_skip_tls_verify;
        k8s.insecure_plain_http = self.insecure_plain_http;
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

/// The executors whose runs outlive their runner: docker and k8s.
fn resumable_executor() -> impl clap::builder::TypedValueParser<Value = ExecutorKind> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(["docker", "k8s"]).map(|name| {
        if name == "k8s" {
            ExecutorKind::K8s
        } else {
            ExecutorKind::Docker
        }
    })
}

#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// Backend the run is on: docker or k8s (the shell's runs end with
    /// their runner, so it is not offered).
    #[arg(long, value_parser = resumable_executor())]
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
    /// Most bytes the outputs may unpack to; default the run's.
    #[arg(long, value_name = "SIZE", value_parser = parse_bytes)]
    pub outputs_max: Option<i64>,
    #[command(flatten)]
    pub reach: ReachArgs,
}

#[derive(Debug, Args)]
pub struct CleanupArgs {
    /// Backend to clean: shell, docker or k8s (no default, as for `run`:
    /// cleaning the wrong one is never what was meant).
    #[arg(long, value_enum)]
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
