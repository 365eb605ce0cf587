//! A workflow file's text made a [`Workflow`]: the job picked, its
//! header read, each step built with its expressions checked and placed.

use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use executor_core::expr::{Condition, Template, Value};
use executor_core::{CacheSpec, Step};

use super::file::{CacheEntry, ContainerEntry, Defaults, File, Job, StepEntry};
use super::place::{expr_error, line_of, locate};
use super::script::{self, Shell};
use super::service::service;
use super::variables::variables;
use super::Workflow;

const RUN_STEPS_ONLY: &str = "this runner runs `run:` steps only: put what the action does in a \
                              `run:` script (a checkout is already in WORK_DIR)";

/// What every step of the job shares.
struct Shared<'a> {
    text: &'a str,
    /// The line the job (or the flat file's steps) starts on.
    from: usize,
    defaults: Defaults,
    image: Option<&'a str>,
    /// The job's variables computed when each step starts.
    inputs: Vec<(String, Template)>,
}

pub(super) fn workflow(
    text: &str,
    job: Option<&str>,
    image: Option<&str>,
) -> anyhow::Result<Workflow> {
    let file: File = serde_yaml_ng::from_str(text).map_err(|e| refine(e, text))?;
    let _ = (
        &file.name,
        &file.on,
        &file.run_name,
        &file.permissions,
        &file.concurrency,
    );
    let mut workflow = Workflow::default();
    let mut inputs = Vec::new();
    variables(file.env, "env", text, &mut workflow, &mut inputs)?;
    let defaults = file.defaults.unwrap_or_default();
    let (steps, services, caches, from, defaults) = match (file.steps, file.jobs) {
        (Some(_), Some(_)) => bail!(
            "steps: and jobs: are both at the top: give the steps at the top (this runner's form) \
             or in one job (Actions' form), not both"
        ),
        (None, None) => bail!("steps: no steps in it (give steps:, or jobs: with one job's steps)"),
        (Some(steps), None) => (steps, file.services, file.caches, 1, defaults),
        (None, Some(jobs)) => {
            if job.is_none() && (!file.services.is_empty() || !file.caches.is_empty()) {
                bail!("services: and caches: at the top go with steps: at the top; in Actions' form give them in the job");
            }
            let (name, picked) = pick(jobs, job)?;
            let from = line_of(text, &format!("{name}:"), 1);
            let at = format!("jobs: {name}");
            let picked = header(picked, &at, text, from, &mut workflow, &mut inputs)?;
            let merged = Defaults {
                run: picked.defaults.and_then(|d| d.run).or(defaults.run),
            };
            (picked.steps, picked.services, picked.caches, from, merged)
        }
    };
    if steps.is_empty() {
        bail!("steps: no steps in it");
    }
    for (name, entry) in services {
        workflow.services.push(service(&name, entry, text)?);
    }
    for cache in caches {
        workflow.caches.push(cache_of(cache)?);
    }
    let image = workflow.image.as_deref().or(image).map(str::to_string);
    let shared = Shared {
        text,
        from,
        defaults,
        image: image.as_deref(),
        inputs,
    };
    for (index, entry) in steps.into_iter().enumerate() {
        let (step, secrets) = step_of(entry, index, &shared)?;
        for name in secrets {
            workflow
                .secrets
                .push((name, format!("step {index} ({:?})", step.name)));
        }
        workflow.steps.push(step);
    }
    Ok(workflow)
}

/// serde's refusal, said in this runner's words where it has some.
fn refine(err: serde_yaml_ng::Error, text: &str) -> anyhow::Error {
    let message = err.to_string();
    for key in ["uses", "with", "strategy"] {
        if message.starts_with(&format!("{key}: "))
            || message.contains(&format!("unknown field `{key}`"))
        {
            let at = err.location().map_or_else(
                || locate(text, &format!("{key}:"), 1),
                |l| format!("line {} column {}", l.line(), l.column()),
            );
            return anyhow!("{key}: at {at}: {RUN_STEPS_ONLY}");
        }
    }
    // serde places nothing at the top of the file: the key is found there.
    if let (None, Some(key)) = (
        err.location(),
        message
            .split("unknown field `")
            .nth(1)
            .and_then(|rest| rest.split('`').next()),
    ) {
        return anyhow!("{message}, at {}", locate(text, &format!("{key}:"), 1));
    }
    anyhow::Error::new(err)
}

fn pick(
    jobs: std::collections::BTreeMap<String, Job>,
    wanted: Option<&str>,
) -> anyhow::Result<(String, Job)> {
    let names: Vec<String> = jobs.keys().cloned().collect();
    match wanted {
        Some(name) => {
            let mut jobs = jobs;
            let job = jobs.remove(name).ok_or_else(|| {
                anyhow!("jobs: no job {name:?}; the file has {}", names.join(", "))
            })?;
            Ok((name.to_string(), job))
        }
        None if jobs.len() == 1 => Ok(jobs
            .into_iter()
            .next()
            .ok_or_else(|| anyhow!("jobs: empty"))?),
        None if jobs.is_empty() => bail!("jobs: no job in it"),
        None => bail!(
            "jobs: the file has {} jobs ({}): pick one with --job NAME",
            names.len(),
            names.join(", ")
        ),
    }
}

/// The job's header: what the run takes from it, what it ignores (said
/// in a note), what it refuses.
fn header(
    mut job: Job,
    at: &str,
    text: &str,
    from: usize,
    workflow: &mut Workflow,
    inputs: &mut Vec<(String, Template)>,
) -> anyhow::Result<Job> {
    if job.uses.is_some() {
        bail!(
            "{at}: uses: at {}: {RUN_STEPS_ONLY}",
            locate(text, "uses:", from)
        );
    }
    if job.strategy.is_some() {
        bail!(
            "{at}: strategy: at {}: this runner runs one job once, with no matrix; run it once per \
             combination, each with its variables (--env)",
            locate(text, "strategy:", from)
        );
    }
    if job.condition.is_some() {
        bail!(
            "{at}: if: at {}: a job's condition is the caller's to decide; run the job or not",
            locate(text, "if:", from)
        );
    }
    let _ = &job.name;
    for (key, said) in [
        ("runs-on", job.runs_on.take().map(|v| describe(&v))),
        ("needs", job.needs.take().map(|v| describe(&v))),
        ("permissions", job.permissions.take().map(|_| String::new())),
        ("outputs", job.outputs.take().map(|_| String::new())),
    ] {
        if let Some(value) = said {
            workflow.notes.push(format!(
                "{at}: {key}:{} is read and ignored: {}",
                if value.is_empty() {
                    String::new()
                } else {
                    format!(" {value}")
                },
                match key {
                    "runs-on" =>
                        "the run's environment is the executor and image this runner was given",
                    "needs" => "this run is this one job",
                    "permissions" => "there is no GitHub token here",
                    _ => "a job's outputs go to the result's steps",
                }
            ));
        }
    }
    variables(
        job.env.take(),
        &format!("{at}: env"),
        text,
        workflow,
        inputs,
    )?;
    if let Some(container) = job.container.take() {
        let (image, env, options) = match container {
            ContainerEntry::Image(image) => (image, None, None),
            ContainerEntry::Full(full) => (full.image, full.env, full.options),
        };
        if let Some(options) = options.filter(|o| !o.trim().is_empty()) {
            workflow.container_flags = container_flags(&options).map_err(|e| {
                anyhow!(
                    "{at}: container: options: at {}: {e}",
                    locate(text, "options:", from)
                )
            })?;
        }
        if image.contains("${{") {
            bail!(
                "{at}: container: image: at {}: an image is plain text here",
                locate(text, &image, from)
            );
        }
        workflow.image = Some(image);
        variables(
            env,
            &format!("{at}: container: env"),
            text,
            workflow,
            inputs,
        )?;
    }
    if let Some(minutes) = job.timeout_minutes {
        workflow.timeout = Some(minutes_of(minutes).with_context(|| at.to_string())?);
    }
    Ok(job)
}

/// The flags of `docker run` a job's `container: options:` may give, as
/// this runner has them (the Docker executor's).
const CONTAINER_FLAGS: [&str; 13] = [
    "--memory",
    "--cpus",
    "--network",
    "--user",
    "--cap-drop",
    "--read-only",
    "--volume",
    "--privileged",
    "--runtime",
    "--shm-size",
    "--add-host",
    "--dns",
    "--device",
];

/// `container: options:` as this runner's flags: each one a flag of
/// `docker run` this runner has under the same name.
fn container_flags(options: &str) -> Result<Vec<String>, String> {
    let words =
        shlex::split(options).ok_or_else(|| format!("{options:?} has an unclosed quote"))?;
    // `docker run`'s short forms, as this runner's long ones.
    let words: Vec<String> = words
        .into_iter()
        .map(|w| match w.as_str() {
            "-v" => "--volume".to_string(),
            "-m" => "--memory".to_string(),
            "-u" => "--user".to_string(),
            _ => w,
        })
        .collect();
    for word in words.iter().filter(|w| w.starts_with('-')) {
        let flag = word.split('=').next().unwrap_or(word);
        if !CONTAINER_FLAGS.contains(&flag) {
            return Err(format!(
                "{word} is not a flag this runner has; it takes {}",
                CONTAINER_FLAGS.join(", ")
            ));
        }
    }
    Ok(words)
}

fn describe(value: &serde_yaml_ng::Value) -> String {
    serde_yaml_ng::to_string(value)
        .map(|s| s.trim().replace('\n', " "))
        .unwrap_or_default()
}

fn cache_of(cache: CacheEntry) -> anyhow::Result<CacheSpec> {
    CacheSpec::parse(&format!("{}={}", cache.key, cache.path))
        .with_context(|| format!("caches: key {:?}", cache.key))
}

fn step_of(
    entry: StepEntry,
    index: usize,
    shared: &Shared<'_>,
) -> anyhow::Result<(Step, Vec<String>)> {
    let text = shared.text;
    let from = shared.from;
    let number = index.saturating_add(1);
    let label = entry
        .name
        .clone()
        .or_else(|| entry.run.as_deref().map(|run| default_name(run, number)))
        .or_else(|| entry.id.clone())
        .unwrap_or_else(|| format!("#{number}"));
    let at = format!("steps[{index}] ({label:?})");
    if entry.uses.is_some() || entry.with.is_some() {
        let key = if entry.uses.is_some() {
            "uses:"
        } else {
            "with:"
        };
        bail!(
            "{at}: {key} at {}: {RUN_STEPS_ONLY}",
            locate(text, key, from)
        );
    }
    let Some(run) = entry.run else {
        bail!("{at}: it has no run: script");
    };
    if let Some(name) = entry.name.as_deref().filter(|n| n.contains("${{")) {
        bail!(
            "{at}: name: at {}: a step's name is plain text here (it names the step in the log and the result)",
            locate(text, name, from)
        );
    }
    let name = entry
        .name
        .clone()
        .unwrap_or_else(|| default_name(&run, number));
    let rewritten =
        script::rewrite(&run).map_err(|e| expr_error(&at, "run", &run, &e, text, from))?;
    let defaults = shared.defaults.run.clone().unwrap_or_default();
    let shell_name = entry.shell.or(defaults.shell);
    let shell = match shell_name.as_deref() {
        None => Shell::Sh,
        Some(name) => Shell::parse(name).ok_or_else(|| {
            anyhow!(
                "{at}: shell: {name:?} at {}: this runner takes shell: sh or shell: bash",
                locate(text, &format!("shell: {name}"), from)
            )
        })?,
    };
    let folder = entry.working_directory.or(defaults.working_directory);
    if let Some(f) = folder.as_deref().filter(|f| f.contains("${{")) {
        bail!(
            "{at}: working-directory: {f:?} at {}: a folder is plain text here",
            locate(text, f, from)
        );
    }
    let script_text = script::finish(&rewritten.script, shell, folder.as_deref(), shared.image);
    let mut step = Step::new(name, script_text);
    step.id = entry.id;
    if let Some(id) = &step.id {
        if !executor_core::expr::name_ok(id) {
            bail!(
                "{at}: id: {id:?} at {}: an id is a letter or _, then letters, digits, _ or -",
                locate(text, &format!("id: {id}"), from)
            );
        }
    }
    let mut holder = Workflow::default();
    let mut inputs = shared.inputs.clone();
    variables(
        entry.env,
        &format!("{at}: env"),
        text,
        &mut holder,
        &mut inputs,
    )?;
    step.env = holder.env;
    if let Some((alias, _)) = holder.secret_aliases.first() {
        bail!(
            "{at}: env: {alias} at {}: a step's variable that is a secret is given to the whole run: \
             set it in the job's env:, or read secrets.NAME in the script",
            locate(text, &format!("{alias}:"), from)
        );
    }
    inputs.extend(rewritten.inputs);
    step.inputs = inputs;
    step = step.continue_on_error(entry.continue_on_error);
    if let Some(minutes) = entry.timeout_minutes {
        step = step.timeout(minutes_of(minutes).with_context(|| at.clone())?);
    }
    if let Some(condition) = entry.condition {
        let parsed = Condition::parse(&condition)
            .map_err(|e| expr_error(&at, "if", &condition, &e, text, from))?;
        step = step.when(parsed);
    }
    let mut secrets = rewritten.secrets;
    for value in step
        .condition
        .iter()
        .flat_map(|c| c.values())
        .chain(step.inputs.iter().flat_map(|(_, t)| t.values()))
    {
        if let Value::Secret(name) = value {
            if !secrets.contains(name) {
                secrets.push(name.clone());
            }
        }
    }
    Ok((step, secrets))
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

fn minutes_of(minutes: f64) -> anyhow::Result<Duration> {
    let max = executor_core::MAX_TIMEOUT.as_secs_f64() / 60.0;
    if !minutes.is_finite() || minutes <= 0.0 || minutes > max {
        bail!("timeout-minutes: {minutes} is not a number of minutes above 0 and at most {max}");
    }
    Ok(Duration::from_secs_f64(minutes * 60.0))
}
