//! `--service NAME=IMAGE` and its companions, and a workflow file's
//! `services:`, into the run's [`Service`]s.

use anyhow::{bail, Context};
use executor_core::{Readiness, Service};

/// The service flags of `run`, as given.
#[derive(Debug, Default, Clone)]
pub struct ServiceFlags {
    pub services: Vec<(String, String)>,
    pub commands: Vec<(String, String)>,
    pub env: Vec<(String, (String, String))>,
    pub ready: Vec<(String, Readiness)>,
}

/// `NAME=VALUE`, for `--service`, `--service-command`, `--service-ready`.
pub fn parse_named(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_string(), value.to_string())),
        _ => Err(format!("{text:?} is not NAME=VALUE")),
    }
}

/// `NAME:KEY=VALUE`, for `--service-env`.
pub fn parse_env(text: &str) -> Result<(String, (String, String)), String> {
    let bad = || format!("{text:?} is not NAME:KEY=VALUE (the service, then its variable)");
    let (name, rest) = text.split_once(':').ok_or_else(bad)?;
    let (key, value) = rest.split_once('=').ok_or_else(bad)?;
    if name.is_empty() {
        return Err(bad());
    }
    executor_core::validate_env_key(key).map_err(|e| e.to_string())?;
    Ok((name.to_string(), (key.to_string(), value.to_string())))
}

/// `NAME=tcp:PORT` or `NAME=exec:SCRIPT`, for `--service-ready`.
pub fn parse_ready(text: &str) -> Result<(String, Readiness), String> {
    let (name, check) = parse_named(text)?;
    Ok((name, readiness(&check)?))
}

/// `tcp:PORT` or `exec:SCRIPT`.
pub fn readiness(check: &str) -> Result<Readiness, String> {
    if let Some(port) = check.strip_prefix("tcp:") {
        return match port.parse::<u16>() {
            Ok(port) if port > 0 => Ok(Readiness::Tcp(port)),
            _ => Err(format!("{check:?}: tcp: takes a port from 1 to 65535")),
        };
    }
    if let Some(script) = check.strip_prefix("exec:") {
        if script.trim().is_empty() {
            return Err(format!("{check:?}: exec: takes a script"));
        }
        return Ok(Readiness::Exec(script.to_string()));
    }
    Err(format!(
        "{check:?} is not a readiness check: use tcp:PORT (something listens on the port) or \
         exec:SCRIPT (the script exits 0 in the service's container)"
    ))
}

impl ServiceFlags {
    /// The services the flags name, each flag checked against a `--service`.
    pub fn services(&self) -> anyhow::Result<Vec<Service>> {
        let mut out: Vec<Service> = Vec::new();
        for (name, image) in &self.services {
            if out.iter().any(|s| &s.name == name) {
                bail!("--service {name}: named twice");
            }
            out.push(Service::new(name, image));
        }
        let find = |out: &mut Vec<Service>, name: &str, flag: &str| -> anyhow::Result<usize> {
            out.iter().position(|s| s.name == name).with_context(|| {
                format!("{flag} {name}: no --service {name}=IMAGE names that service")
            })
        };
        for (name, script) in &self.commands {
            let at = find(&mut out, name, "--service-command")?;
            out[at].command = Some(script.clone());
        }
        for (name, (key, value)) in &self.env {
            let at = find(&mut out, name, "--service-env")?;
            out[at].env.push((key.clone(), value.clone()));
        }
        for (name, check) in &self.ready {
            let at = find(&mut out, name, "--service-ready")?;
            out[at].ready = Some(check.clone());
        }
        for service in &out {
            service
                .check()
                .map_err(|e| anyhow::anyhow!("--service: {e}"))?;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_name_their_service() {
        let flags = ServiceFlags {
            services: vec![("db".into(), "postgres:16".into())],
            commands: vec![],
            env: vec![parse_env("db:POSTGRES_PASSWORD=pw").unwrap()],
            ready: vec![parse_ready("db=tcp:5432").unwrap()],
        };
        let services = flags.services().unwrap();
        assert_eq!(services[0].ready, Some(Readiness::Tcp(5432)));
        assert_eq!(services[0].env, [("POSTGRES_PASSWORD".into(), "pw".into())]);

        let stray = ServiceFlags {
            commands: vec![("cache".into(), "redis-server".into())],
            ..flags
        };
        let err = format!("{:#}", stray.services().unwrap_err());
        assert!(err.contains("--service-command cache"), "{err}");
    }

    #[test]
    fn readiness_is_tcp_or_exec() {
        assert_eq!(
            readiness("exec:pg_isready"),
            Ok(Readiness::Exec("pg_isready".into()))
        );
        for bad in ["tcp:0", "tcp:x", "http:80", "exec:"] {
            assert!(readiness(bad).is_err(), "{bad}");
        }
        assert!(parse_env("db=x").is_err());
    }
}
