//! The workflow file (`--workflow FILE`): a run's steps, variables and
//! caches in YAML, with the step keys a GitHub Actions user already writes.
//!
//! ```yaml
//! env:
//!   CARGO_TERM_COLOR: never
//! caches:
//!   - key: cargo
//!     path: /root/.cargo
//! services:
//!   db:
//!     image: postgres:16
//!     env:
//!       POSTGRES_PASSWORD: test
//!     ready: tcp:5432
//! steps:
//!   - name: build
//!     run: |
//!       cargo build
//!       cargo test
//!     timeout-minutes: 20
//!   - name: lint
//!     run: cargo clippy
//!     continue-on-error: true
//!   - name: upload
//!     if: always()
//!     run: cp -r target/report "$OUTPUTS_DIR"
//! ```
//!
//! Unknown keys are refused with their line, so a `uses:` or a misspelt
//! `timeout-minute` never passes silently.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};
use executor_core::{CacheSpec, Step};
use serde::Deserialize;

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
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    env: Option<serde_yaml_ng::Mapping>,
    #[serde(default)]
    caches: Vec<CacheEntry>,
    #[serde(default)]
    services: std::collections::BTreeMap<String, ServiceEntry>,
    steps: Vec<StepEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ServiceEntry {
    image: String,
    command: Option<String>,
    #[serde(default)]
    env: Option<serde_yaml_ng::Mapping>,
    ready: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CacheEntry {
    key: String,
    path: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct StepEntry {
    name: Option<String>,
    run: String,
    #[serde(default)]
    env: Option<serde_yaml_ng::Mapping>,
    timeout_minutes: Option<f64>,
    #[serde(default)]
    continue_on_error: bool,
    #[serde(rename = "if")]
    condition: Option<String>,
}

/// Reads the workflow file at `path`; `-` is standard input, read by
/// `stdin` (called at most once).
pub fn read(
    path: &Path,
    stdin: impl FnOnce() -> anyhow::Result<String>,
) -> anyhow::Result<Workflow> {
    let (text, shown) = if path == Path::new("-") {
        (stdin()?, "standard input".to_string())
    } else {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read workflow file {}", path.display()))?;
        (text, path.display().to_string())
    };
    parse(&text).with_context(|| format!("workflow file {shown}"))
}

/// Parses a workflow file's text.
pub fn parse(text: &str) -> anyhow::Result<Workflow> {
    // serde_yaml_ng's message names the key and says `at line L column C`.
    let file: File = serde_yaml_ng::from_str(text)?;
    if file.steps.is_empty() {
        bail!("steps: no steps in it");
    }
    let mut workflow = Workflow {
        env: variables(file.env, "env")?,
        ..Workflow::default()
    };
    for (name, entry) in file.services {
        let at = format!("services: {name}");
        let mut service = executor_core::Service::new(&name, entry.image);
        service.command = entry.command;
        service.env = variables(entry.env, &format!("{at}: env"))?;
        if let Some(check) = entry.ready {
            service.ready = Some(
                crate::services::readiness(&check)
                    .map_err(|e| anyhow::anyhow!("{at}: ready: {e}"))?,
            );
        }
        service.check().map_err(|e| anyhow::anyhow!("{at}: {e}"))?;
        workflow.services.push(service);
    }
    for cache in file.caches {
        let spec = CacheSpec::parse(&format!("{}={}", cache.key, cache.path))
            .with_context(|| format!("caches: key {:?}", cache.key))?;
        workflow.caches.push(spec);
    }
    for (index, entry) in file.steps.into_iter().enumerate() {
        let number = index.saturating_add(1);
        let name = entry
            .name
            .clone()
            .unwrap_or_else(|| default_name(&entry.run, number));
        let at = format!("steps[{number}] ({name:?})");
        let mut step = Step::new(name, entry.run);
        step.env = variables(entry.env, &format!("{at}: env"))?;
        step = step.continue_on_error(entry.continue_on_error);
        if let Some(minutes) = entry.timeout_minutes {
            step = step.timeout(minutes_of(minutes).with_context(|| at.clone())?);
        }
        step = match entry.condition.as_deref().map(condition) {
            None => step,
            Some(Ok(always)) => step.always(always),
            Some(Err(err)) => return Err(err.context(at)),
        };
        workflow.steps.push(step);
    }
    Ok(workflow)
}

/// A step without a `name`: `Run` and its script's first line, as GitHub
/// shows one; with the step's number when that is not unique enough.
fn default_name(run: &str, number: usize) -> String {
    let first = run
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let short: String = first.chars().take(40).collect();
    format!("#{number} run {short}")
}

/// `if:`: `always()` runs the step after an earlier failure; `success()`
/// is what every step does without one. Nothing else is evaluated.
fn condition(text: &str) -> anyhow::Result<bool> {
    let text = text.trim();
    let bare = text
        .strip_prefix("${{")
        .and_then(|t| t.strip_suffix("}}"))
        .map_or(text, str::trim);
    match bare {
        "always()" => Ok(true),
        "success()" => Ok(false),
        _ => bail!(
            "if: {text:?} is not understood: this runner knows `always()` (run after an earlier \
             failure too) and `success()` (the default)"
        ),
    }
}

fn minutes_of(minutes: f64) -> anyhow::Result<Duration> {
    let max = executor_core::MAX_TIMEOUT.as_secs_f64() / 60.0;
    if !minutes.is_finite() || minutes <= 0.0 || minutes > max {
        bail!("timeout-minutes: {minutes} is not a number of minutes above 0 and at most {max}");
    }
    Ok(Duration::from_secs_f64(minutes * 60.0))
}

/// A mapping of variables: keys checked as `--env` checks them, values
/// strings, numbers or booleans (as GitHub Actions takes them).
fn variables(
    mapping: Option<serde_yaml_ng::Mapping>,
    at: &str,
) -> anyhow::Result<Vec<(String, String)>> {
    use serde_yaml_ng::Value;
    let mut out = Vec::new();
    for (key, value) in mapping.unwrap_or_default() {
        let Value::String(key) = key else {
            bail!("{at}: a variable's name is not a string: {key:?}");
        };
        executor_core::validate_env_key(&key).with_context(|| format!("{at}: {key}"))?;
        let value = match value {
            Value::String(s) => s,
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            Value::Null => String::new(),
            _ => bail!("{at}: {key}: a value is a string, a number or a boolean"),
        };
        out.push((key, value));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_a_github_user_writes_for_a_run_step() {
        let workflow = parse(
            "env:\n  A: 1\n  B: yes\ncaches:\n  - key: cargo\n    path: /root/.cargo\nsteps:\n\
             - name: build\n  run: |\n    make\n    make test\n  env:\n    CC: clang\n  timeout-minutes: 1.5\n\
             - run: lint --all\n  continue-on-error: true\n\
             - name: upload\n  if: ${{ always() }}\n  run: cp x /outputs\n",
        )
        .unwrap();
        assert_eq!(
            workflow.env,
            [("A".into(), "1".into()), ("B".into(), "yes".into())]
        );
        assert_eq!(workflow.caches[0].path, "/root/.cargo");
        let [build, lint, upload] = &workflow.steps[..] else {
            panic!("{:?}", workflow.steps)
        };
        assert_eq!(build.script, "make\nmake test\n");
        assert_eq!(build.env, [("CC".into(), "clang".into())]);
        assert_eq!(build.timeout, Some(Duration::from_secs(90)));
        assert_eq!(lint.name, "#2 run lint --all");
        assert!(lint.continue_on_error && !lint.always);
        assert!(upload.always && !upload.continue_on_error);
    }

    #[test]
    fn services_with_their_image_command_variables_and_check() {
        let workflow = parse(
            "services:\n  db:\n    image: postgres:16\n    env:\n      POSTGRES_PASSWORD: pw\n    ready: tcp:5432\n\
             \x20 web:\n    image: busybox\n    command: httpd -f\n    ready: 'exec:true'\nsteps:\n  - run: x\n",
        )
        .unwrap();
        let [db, web] = &workflow.services[..] else {
            panic!("{:?}", workflow.services)
        };
        assert_eq!(db.ready, Some(executor_core::Readiness::Tcp(5432)));
        assert_eq!(db.env, [("POSTGRES_PASSWORD".into(), "pw".into())]);
        assert_eq!(web.command.as_deref(), Some("httpd -f"));
        let err = parse("services:\n  db:\n    image: x\n    ports: [5432]\nsteps:\n  - run: x\n")
            .unwrap_err();
        let text = format!("{err:#}");
        assert!(
            text.contains("unknown field `ports`") && text.contains("line 4"),
            "{text}"
        );
        let err = parse("services:\n  Db:\n    image: x\nsteps:\n  - run: x\n").unwrap_err();
        assert!(format!("{err:#}").contains("services: Db"), "{err:#}");
    }

    #[test]
    fn an_unknown_key_is_refused_with_its_line() {
        let err = parse("steps:\n  - name: a\n    run: true\n    uses: actions/checkout@v4\n")
            .unwrap_err();
        let text = format!("{err:#}");
        assert!(text.contains("unknown field `uses`"), "{text}");
        assert!(text.contains("line 4"), "{text}");
    }

    #[test]
    fn conditions_other_than_always_and_success_are_refused() {
        let err = parse("steps:\n  - run: x\n    if: github.event_name == 'push'\n").unwrap_err();
        let text = format!("{err:#}");
        assert!(
            text.contains("steps[1]") && text.contains("always()"),
            "{text}"
        );
    }

    #[test]
    fn bad_values_name_where_they_are() {
        for (yaml, says) in [
            ("steps: []\n", "no steps"),
            (
                "steps:\n  - run: x\n    timeout-minutes: 0\n",
                "timeout-minutes",
            ),
            ("steps:\n  - run: x\n    env:\n      1A: x\n", "1A"),
            ("steps:\n  - run: x\n    env:\n      A: [1]\n", "A: a value"),
            (
                "caches:\n  - key: ../x\n    path: /a\nsteps:\n  - run: x\n",
                "caches",
            ),
            ("steps:\n  - name: a\n", "missing field `run`"),
        ] {
            let text = format!("{:#}", parse(yaml).unwrap_err());
            assert!(text.contains(says), "{yaml}: {text}");
        }
    }
}
