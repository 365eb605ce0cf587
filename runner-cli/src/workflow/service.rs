//! A service in the workflow file: this runner's shape (`command`,
//! `ready`) or Actions' (`ports`, `options: --health-cmd ...`).

use anyhow::{anyhow, bail};

use super::file::ServiceEntry;
use super::place::{line_of, locate};
use super::variables::variables;
use super::Workflow;

pub(super) fn service(
    name: &str,
    entry: ServiceEntry,
    text: &str,
) -> anyhow::Result<executor_core::Service> {
    let at = format!("services: {name}");
    let mut service = executor_core::Service::new(name, entry.image);
    service.command = entry.command;
    let mut env = Workflow::default();
    let mut computed = Vec::new();
    variables(
        entry.env,
        &format!("{at}: env"),
        text,
        &mut env,
        &mut computed,
    )?;
    if !computed.is_empty() || !env.secret_aliases.is_empty() {
        bail!(
            "{at}: env: at {}: a service's variables are plain values: a service is made \
             before any step, and its variables are kept in its container's (or pod's) spec, \
             where no secret belongs",
            locate(text, "${{", line_of(text, &format!("{name}:"), 1))
        );
    }
    service.env = env.env;
    let _ = entry.ports;
    let ready = match (entry.ready, entry.options) {
        (Some(_), Some(_)) => bail!("{at}: give ready: or options: --health-cmd, not both"),
        (Some(check), None) => Some(check),
        (None, Some(options)) => health_cmd(&options).map_err(|e| {
            anyhow!(
                "{at}: options: at {}: {e}",
                locate(text, "options:", line_of(text, &format!("{name}:"), 1))
            )
        })?,
        (None, None) => None,
    };
    if let Some(check) = ready {
        service.ready =
            Some(crate::services::readiness(&check).map_err(|e| anyhow!("{at}: ready: {e}"))?);
    }
    service.check().map_err(|e| anyhow!("{at}: {e}"))?;
    Ok(service)
}

/// Actions' service `options:`: `--health-cmd CMD` is the readiness
/// check; its pacing options are read (this runner paces its own checks);
/// any other option is refused.
fn health_cmd(options: &str) -> Result<Option<String>, String> {
    let words =
        shlex::split(options).ok_or_else(|| format!("{options:?} has an unclosed quote"))?;
    let mut words = words.into_iter();
    let mut check = None;
    while let Some(word) = words.next() {
        let (flag, inline) = match word.split_once('=') {
            Some((f, v)) => (f.to_string(), Some(v.to_string())),
            None => (word, None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| words.next())
                .ok_or_else(|| format!("{flag} takes a value"))
        };
        match flag.as_str() {
            "--health-cmd" => check = Some(format!("exec:{}", value()?)),
            "--health-interval"
            | "--health-timeout"
            | "--health-retries"
            | "--health-start-period" => {
                value()?;
            }
            other => {
                return Err(format!(
                "{other} is not taken: a service's options here are --health-cmd (its readiness \
                     check) and the --health-* pacing read with it"
            ))
            }
        }
    }
    Ok(check)
}
