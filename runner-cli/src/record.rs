//! The run's record for `resume`: what `run` was given that the resumed
//! part needs again (where the result, outputs and events go, the log's
//! settings, the secrets' names, the caches, how to reach the cluster),
//! kept beside the log as `LOG.run`, so that `resume` needs only
//! `--executor`, `--runner`, `--name` and `--log`. It holds no secret:
//! secrets are named, and read again from the environment or their files.

use std::path::{Path, PathBuf};
use std::time::Duration;

use executor_core::tar::Compression;
use serde::{Deserialize, Serialize};

use crate::args::{K8sArgs, RunArgs};

/// What `run` was given, as `resume` needs it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RunRecord {
    pub name: String,
    pub runner: String,
    pub outputs: PathBuf,
    pub result: PathBuf,
    pub events: Option<String>,
    pub timestamps: bool,
    pub log_limit: Option<u64>,
    pub secrets: Vec<String>,
    pub secret_files: Vec<(String, PathBuf)>,
    pub cache_dir: Option<PathBuf>,
    pub cache_max: i64,
    /// Absent in a record of an older runner-cli: the default then.
    #[serde(default = "default_outputs_max")]
    pub outputs_max: i64,
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    pub namespace: Option<String>,
    pub insecure_skip_tls_verify: bool,
    pub insecure_plain_http: bool,
    pub reconnect_timeout_ms: u64,
    pub compression: String,
}

/// `--outputs-max`'s default, 10 GiB.
fn default_outputs_max() -> i64 {
    10 << 30
}

/// Where the record of the run logging to `log` is.
pub fn path(log: &Path) -> PathBuf {
    let mut name = log.as_os_str().to_owned();
    name.push(".run");
    PathBuf::from(name)
}

/// `path` made absolute against the current folder: a resume may start
/// elsewhere.
fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

pub fn compression_name(c: Compression) -> &'static str {
    match c {
        Compression::Auto => "auto",
        Compression::Always => "always",
        Compression::Never => "never",
    }
}

impl RunRecord {
    /// The record of `args`.
    pub fn of(args: &RunArgs) -> Self {
        RunRecord {
            name: args.name.clone(),
            runner: args.runner.clone(),
            outputs: absolute(&args.outputs),
            result: absolute(&args.result),
            events: args.events.as_ref().map(|e| {
                if e == "-" {
                    e.clone()
                } else {
                    absolute(Path::new(e)).display().to_string()
                }
            }),
            timestamps: args.timestamps,
            log_limit: args.log_limit.0,
            secrets: args.secrets.clone(),
            secret_files: args
                .secret_files
                .iter()
                .map(|(n, p)| (n.clone(), absolute(p)))
                .collect(),
            cache_dir: args.cache_dir.as_deref().map(absolute),
            cache_max: args.cache_max,
            outputs_max: args.outputs_max,
            kubeconfig: args.k8s.kubeconfig.as_deref().map(absolute),
            context: args.k8s.context.clone(),
            namespace: args.k8s.namespace.clone(),
            insecure_skip_tls_verify: args.k8s.insecure_skip_tls_verify,
            insecure_plain_http: args.k8s.insecure_plain_http,
            reconnect_timeout_ms: u64::try_from(args.k8s.reconnect_timeout.as_millis())
                .unwrap_or(u64::MAX),
            compression: compression_name(args.k8s.compression).to_string(),
        }
    }

    /// Writes it beside `log`, whole or not at all.
    ///
    /// # Errors
    /// When it cannot be written.
    pub fn write(&self, log: &Path) -> std::io::Result<()> {
        let path = path(log);
        let json = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        let mut partial = path.as_os_str().to_owned();
        partial.push(".partial");
        let partial = PathBuf::from(partial);
        std::fs::write(&partial, json)?;
        std::fs::rename(&partial, &path)
    }

    /// The record beside `log`; `None` for a log that has none (written
    /// by an older runner-cli).
    ///
    /// # Errors
    /// A message naming the file when it is there but cannot be read.
    pub fn read(log: &Path) -> Result<Option<Self>, String> {
        let path = path(log);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|err| {
                format!(
                    "the run's record {} cannot be read ({err}); give resume the flags run was given",
                    path.display()
                )
            }),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(format!(
                "the run's record {} cannot be read ({err})",
                path.display()
            )),
        }
    }

    /// The cluster connection flags it records, over `k8s`'s defaults;
    /// never an insecure transport: the record is a file beside the log,
    /// which anyone who can write there can change, so only `resume`'s own
    /// command line turns one on ([`RunRecord::insecure_flags_beyond`]
    /// names them).
    pub fn reach(&self, k8s: &mut K8sArgs) {
        k8s.kubeconfig.clone_from(&self.kubeconfig);
        k8s.context.clone_from(&self.context);
        k8s.namespace.clone_from(&self.namespace);
        k8s.reconnect_timeout = Duration::from_millis(self.reconnect_timeout_ms);
        if let Ok(c) = self.compression.parse() {
            k8s.compression = c;
        }
    }

    /// The insecure transport flags the run says it was given that `k8s`
    /// (resume's own) does not turn on: a resume does not take them from
    /// the record.
    pub fn insecure_flags_beyond(&self, k8s: &K8sArgs) -> Vec<&'static str> {
        [
            (
                "--insecure-skip-tls-verify",
                self.insecure_skip_tls_verify && !k8s.insecure_skip_tls_verify,
            ),
            (
                "--insecure-plain-http",
                self.insecure_plain_http && !k8s.insecure_plain_http,
            ),
        ]
        .into_iter()
        .filter_map(|(flag, named)| named.then_some(flag))
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record beside the log can be changed by anyone who can write
    /// there: it never turns on an insecure transport for `resume`.
    #[test]
    fn a_record_never_turns_on_an_insecure_transport() {
        let text = r#"{"name":"n","runner":"did:plc:r","outputs":"/o","result":"/r.json",
            "events":null,"timestamps":false,"logLimit":1,"secrets":[],"secretFiles":[],
            "cacheDir":null,"cacheMax":1,"kubeconfig":"/k","context":null,"namespace":null,
            "insecureSkipTlsVerify":true,"insecurePlainHttp":true,"reconnectTimeoutMs":1,
            "compression":"auto"}"#;
        let record: RunRecord = serde_json::from_str(text).unwrap();
        let mut k8s = crate::args::k8s_defaults();
        record.reach(&mut k8s);
        assert!(!k8s.insecure_skip_tls_verify && !k8s.insecure_plain_http);
        assert_eq!(k8s.kubeconfig.as_deref(), Some(Path::new("/k")));
        assert_eq!(
            record.insecure_flags_beyond(&k8s),
            ["--insecure-skip-tls-verify", "--insecure-plain-http"]
        );
        // One resume's own command line names is not said again.
        k8s.insecure_plain_http = true;
        assert_eq!(
            record.insecure_flags_beyond(&k8s),
            ["--insecure-skip-tls-verify"]
        );
    }
}
