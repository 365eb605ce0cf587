//! Secrets and plain variables from outside the command line, and the
//! runner's own output masked like the run log.

use std::path::Path;
use std::sync::RwLock;

use anyhow::{bail, Context};
use executor_core::mask::{Masker, Secret};

/// The masker of the current run's secrets; everything the runner prints
/// itself (messages, tracing, the dry-run) goes through it.
static MASKER: RwLock<Option<Masker>> = RwLock::new(None);

/// From now on the runner's own output masks these values.
pub fn mask_from_now_on(masker: &Masker) {
    *MASKER.write().unwrap_or_else(|p| p.into_inner()) = Some(masker.clone());
}

/// The current masker (empty before a run's secrets are known).
pub fn masker() -> Masker {
    MASKER
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
        .unwrap_or_default()
}

/// `text` with the run's secret values masked.
pub fn masked(text: &str) -> String {
    masker().mask_str(text).into_owned()
}

/// `--secret NAME` values: each is read from the runner's own variable
/// `NAME`. A `NAME=VALUE` form is refused without echoing the value.
pub fn from_environment(names: &[String]) -> anyhow::Result<Vec<(String, Secret)>> {
    let mut secrets = Vec::new();
    for given in names {
        if let Some((name, _)) = given.split_once('=') {
            bail!(
                "--secret {name}=...: a secret's value is never taken on the command line, \
                 where every local user can read it (ps, /proc); put it in the runner's \
                 environment variable {name} and pass --secret {name}, or in a file and \
                 pass --secret-file {name}=PATH"
            );
        }
        executor_core::validate_env_key(given).with_context(|| format!("--secret {given}"))?;
        match std::env::var(given) {
            Ok(value) => secrets.push((given.clone(), Secret::new(value))),
            Err(std::env::VarError::NotPresent) => bail!(
                "--secret {given}: the runner's environment has no variable {given}; \
                 set it before starting the runner"
            ),
            Err(std::env::VarError::NotUnicode(_)) => {
                bail!("--secret {given}: the variable {given} is not UTF-8 text")
            }
        }
    }
    Ok(secrets)
}

/// `--secret-file NAME=PATH` values: each file's content, one trailing
/// newline removed.
pub fn from_files(pairs: &[(String, std::path::PathBuf)]) -> anyhow::Result<Vec<(String, Secret)>> {
    let mut secrets = Vec::new();
    for (name, path) in pairs {
        let shown = path.display();
        let bytes = std::fs::read(path)
            .with_context(|| format!("--secret-file {name}={shown}: cannot read it"))?;
        let Ok(mut value) = String::from_utf8(bytes) else {
            bail!("--secret-file {name}={shown}: the file is not UTF-8 text");
        };
        if value.ends_with('\n') {
            value.pop();
            if value.ends_with('\r') {
                value.pop();
            }
        }
        secrets.push((name.clone(), Secret::new(value)));
    }
    Ok(secrets)
}

/// Reads a `--env-file` as `docker run --env-file` does: `KEY=VALUE` a
/// line taken literally, `#` comments and blank lines skipped, a bare
/// `KEY` taking the runner's own value (which must be set).
pub fn read_env_file(path: &Path) -> anyhow::Result<Vec<(String, String)>> {
    let shown = path.display();
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--env-file {shown}: cannot read it as UTF-8 text"))?;
    let mut vars = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let at = || format!("--env-file {shown} line {}", n + 1);
        let line = line.trim_start();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (key, value) = match line.split_once('=') {
            Some((key, value)) => (key, value.to_string()),
            None => {
                let key = line.trim_end();
                let value = std::env::var(key).map_err(|_| {
                    anyhow::anyhow!(
                        "{}: {key} has no value and the runner's environment has no {key}; \
                         write {key}=VALUE or set it",
                        at()
                    )
                })?;
                (key, value)
            }
        };
        executor_core::validate_env_key(key).with_context(at)?;
        if value.contains('\0') {
            bail!("{}: the value of {key} has a NUL byte", at());
        }
        vars.push((key.to_string(), value));
    }
    Ok(vars)
}

/// `NAME=PATH` of `--secret-file`.
pub fn parse_secret_file(text: &str) -> Result<(String, std::path::PathBuf), String> {
    let (name, path) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not NAME=PATH"))?;
    executor_core::validate_env_key(name).map_err(|e| e.to_string())?;
    if path.is_empty() {
        return Err(format!("{name}= names no file"));
    }
    Ok((name.to_string(), path.into()))
}

/// Tracing's writer: each event is masked whole, then written to stderr;
/// a failed write is dropped (a closed stderr never ends a run).
pub struct MaskedStderr;

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for MaskedStderr {
    type Writer = EventWriter;
    fn make_writer(&'a self) -> Self::Writer {
        EventWriter(Vec::new())
    }
}

/// One event's text, written out masked when it is dropped.
pub struct EventWriter(Vec<u8>);

impl std::io::Write for EventWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for EventWriter {
    fn drop(&mut self) {
        use std::io::Write as _;
        let text = masked(&String::from_utf8_lossy(&self.0));
        let _ = std::io::stderr().write_all(text.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_files_read_as_docker_reads_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vars");
        let path_var = std::env::var("PATH").unwrap();
        std::fs::write(
            &path,
            "# comment\n\n  A=1\nB= spaced 'quoted' \"x\" \r\nPATH\nC=a=b\n",
        )
        .unwrap();
        assert_eq!(
            read_env_file(&path).unwrap(),
            vec![
                ("A".to_string(), "1".to_string()),
                ("B".to_string(), " spaced 'quoted' \"x\" ".to_string()),
                ("PATH".to_string(), path_var),
                ("C".to_string(), "a=b".to_string()),
            ]
        );
        std::fs::write(&path, "OK=1\nKNOTLESS_TEST_UNSET_VAR\n").unwrap();
        let err = format!("{:#}", read_env_file(&path).unwrap_err());
        assert!(
            err.contains("line 2") && err.contains("KNOTLESS_TEST_UNSET_VAR"),
            "{err}"
        );
        std::fs::write(&path, "1BAD=x\n").unwrap();
        assert!(format!("{:#}", read_env_file(&path).unwrap_err()).contains("line 1"));
    }

    #[test]
    fn a_secret_value_on_the_command_line_is_refused_without_echoing_it() {
        let err = from_environment(&["TOKEN=hunter22".into()])
            .unwrap_err()
            .to_string();
        assert!(err.contains("--secret TOKEN=..."), "{err}");
        assert!(!err.contains("hunter22"), "{err}");
    }

    #[test]
    fn secret_files_lose_one_trailing_newline() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "line one\nline two\n\n").unwrap();
        let got = from_files(&[("T".into(), path.clone())]).unwrap();
        assert_eq!(got[0].1.expose(), "line one\nline two\n");
        let missing = dir.path().join("missing");
        let err = format!("{:#}", from_files(&[("T".into(), missing)]).unwrap_err());
        assert!(
            err.contains("--secret-file T=") && err.contains("missing"),
            "{err}"
        );
    }
}
