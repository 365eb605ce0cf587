//! A run's spec from its flags: the plan (steps file or workflow), its
//! variables and secrets, caches and services, each checked.

use std::path::Path;

use anyhow::{bail, Context};
use executor_core::{read_steps_file, RunSpec};

use crate::args::{ExecutorKind, RunArgs};
use crate::workflow::Workflow;

/// A run's spec, and what its workflow file adds to the flags.
pub(crate) struct Prepared {
    pub(crate) spec: RunSpec,
    /// What the workflow file says that the run reads and does not
    /// follow, for the run log's first lines.
    pub(crate) notes: Vec<String>,
    /// The job's `container: options:`, as this runner's flags.
    pub(crate) container_flags: Vec<String>,
}

/// Checks every input before anything runs; the message names the flag.
pub(crate) fn prepare(args: &RunArgs) -> anyhow::Result<Prepared> {
    crate::foreign::refuse(args).map_err(anyhow::Error::msg)?;
    let on_stdout: Vec<&str> = [
        ("--log", args.log == "-"),
        ("--result", args.result == Path::new("-")),
        ("--events", args.events.as_deref() == Some("-")),
    ]
    .into_iter()
    .filter_map(|(flag, dash)| dash.then_some(flag))
    .collect();
    if on_stdout.len() > 1 {
        bail!(
            "{} are each `-`, standard output, where they would mix: give all but one a file \
             (the run log is on standard output unless --log names a file)",
            on_stdout.join(" and ")
        );
    }
    if !args.dry_run {
        check_targets(args)?;
    }
    if args.executor == ExecutorKind::Shell && args.trigger.is_untrusted() {
        bail!(
            "--trigger {:?} runs untrusted code, and the shell executor runs it directly on this host; \
             use --executor docker or --executor k8s",
            args.trigger
        );
    }
    check_dir(&args.workdir, "--workdir")?;
    if let Some(steps) = &args.steps_dir {
        check_dir(steps, "--steps-dir")?;
    }
    let plan = plan_of(args)?;
    for note in &plan.notes {
        say!("runner-cli: --workflow {note}");
    }
    let mut spec = RunSpec::new(&args.name, &args.runner, &args.workdir, &args.outputs);
    spec.image = args.image.clone().or(plan.image.clone());
    spec.steps_dir = args.steps_dir.clone();
    spec.steps = plan.steps;
    spec.env = plan.env;
    for file in &args.env_files {
        spec.env.extend(crate::secrets::read_env_file(file)?);
    }
    spec.env.extend(args.env.iter().cloned());
    spec.secrets = crate::secrets::from_environment(&args.secrets)?;
    spec.secrets
        .extend(crate::secrets::from_files(&args.secret_files)?);
    for (name, place) in &plan.secrets {
        if !spec.secrets.iter().any(|(k, _)| k == name) {
            bail!(
                "--workflow: {place} reads secrets.{name}, which this run was not given: give it \
                 with --secret {name} (from this process's environment) or --secret-file"
            );
        }
    }
    for (alias, name) in &plan.secret_aliases {
        let value = spec
            .secrets
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone());
        if let (Some(value), false) = (value, alias == name) {
            if spec.secrets.iter().any(|(k, _)| k == alias) {
                bail!("--workflow: {alias} is a secret given by a flag and one the file names; give it once");
            }
            spec.secrets.push((alias.clone(), value));
        }
    }
    // Before anything of the run is printed, errors about it included.
    crate::secrets::mask_from_now_on(&spec.masker());
    let flags = crate::services::ServiceFlags {
        services: args.services.clone(),
        commands: args.service_commands.clone(),
        env: args.service_env.clone(),
        ready: args.service_ready.clone(),
    };
    spec.services = plan.services;
    for service in flags.services()? {
        if spec.services.iter().any(|s| s.name == service.name) {
            bail!(
                "--service {}: the workflow file names that service already",
                service.name
            );
        }
        spec.services.push(service);
    }
    if let Some(limit) = args.service_timeout {
        spec.service_timeout = limit;
    }
    if let (ExecutorKind::Shell, Some(service)) = (args.executor, spec.services.first()) {
        bail!(
            "service {}: the shell executor runs steps on this host and has no service \
             containers; use --executor docker or --executor k8s",
            service.name
        );
    }
    spec.caches = plan.caches;
    spec.caches.extend(args.caches.iter().cloned());
    if args.trigger.is_untrusted() {
        spec.trust = executor_core::Trust::Untrusted;
    }
    if args.executor == ExecutorKind::Shell {
        if let Some(c) = spec.caches.iter().find(|c| c.path.starts_with('/')) {
            bail!(
                "--cache {}={}: the shell executor runs on this host, so cache paths must be relative to WORK_DIR",
                c.key,
                c.path
            );
        }
    }
    // The tighter of the flag and the job's timeout-minutes.
    spec.run_timeout = plan.timeout.map_or(args.timeout, |t| t.min(args.timeout));
    spec.step_timeout = args.step_timeout.unwrap_or(spec.run_timeout);
    if matches!(args.executor, ExecutorKind::Docker | ExecutorKind::K8s) && spec.image.is_none() {
        bail!(
            "--image is required with --executor {}",
            args.executor.name()
        );
    }
    spec.validate()?;
    if !args.dry_run && crate::outputs::replace_earlier(&args.outputs)? {
        say!(
            "runner-cli: --outputs {} held an earlier run's outputs: replaced",
            args.outputs.display()
        );
    }
    spec.check_folders()?;
    let notes = plan
        .notes
        .iter()
        .map(|n| format!("--workflow {n}"))
        .collect();
    Ok(Prepared {
        spec,
        notes,
        container_flags: plan.container_flags,
    })
}

/// The run's flags with a workflow file's `container: options:` given
/// after the command line's own, read as clap reads them; `None` when
/// there are none.
pub(crate) fn with_container_flags(flags: &[String]) -> anyhow::Result<Option<RunArgs>> {
    if flags.is_empty() {
        return Ok(None);
    }
    let argv = std::env::args_os().chain(flags.iter().map(Into::into));
    let parsed = <crate::Cli as clap::Parser>::try_parse_from(argv).map_err(|e| {
        let first = e.to_string().lines().next().unwrap_or("").to_string();
        anyhow::anyhow!("--workflow container: options {}: {first}", flags.join(" "))
    })?;
    match parsed.command {
        crate::args::Command::Run(args) => {
            crate::foreign::refuse(&args)
                .map_err(|e| anyhow::anyhow!("--workflow container: options: {e}"))?;
            Ok(Some(*args))
        }
        _ => bail!("--workflow container: options: not a run"),
    }
}

/// Each place the run writes to can be written, before anything starts:
/// a run that would lose its result at the end is refused at the start.
fn check_targets(args: &RunArgs) -> anyhow::Result<()> {
    let targets = [
        ("--result", Some(args.result.as_path())),
        ("--log", Some(Path::new(&args.log))),
        ("--events", args.events.as_deref().map(Path::new)),
    ];
    for (flag, path) in targets {
        let Some(path) = path.filter(|p| *p != Path::new("-")) else {
            continue;
        };
        executor_core::destination::Destination::of(path)
            .map_err(|err| err.to_string())
            .and_then(|dest| dest.check_writable())
            .map_err(|msg| anyhow::anyhow!("{flag} {}: {msg}", path.display()))?;
    }
    Ok(())
}

fn check_dir(path: &Path, flag: &str) -> anyhow::Result<()> {
    let meta = std::fs::metadata(path).with_context(|| format!("{flag} {}", path.display()))?;
    if !meta.is_dir() {
        bail!("{flag} {} is not a folder", path.display());
    }
    Ok(())
}

/// The steps (and, from a workflow file, the variables and caches) of
/// `--workflow` or `--steps-file`.
pub(crate) fn plan_of(args: &RunArgs) -> anyhow::Result<Workflow> {
    if let Some(path) = &args.workflow {
        return crate::workflow::read(path, args.job.as_deref(), args.image.as_deref(), stdin_text)
            .context("--workflow");
    }
    let Some(path) = &args.steps_file else {
        bail!("give the steps with --workflow FILE or --steps-file FILE");
    };
    let steps = if path == Path::new("-") {
        executor_core::parse_steps(Path::new("standard input"), &stdin_text()?)
    } else {
        read_steps_file(path)
    }
    .context("--steps-file")?;
    if steps.is_empty() {
        bail!("--steps-file {}: no steps in it", path.display());
    }
    Ok(Workflow {
        steps,
        ..Workflow::default()
    })
}

/// Standard input, read once however often it is asked for: the plan is
/// read again for the result of a run that could not start.
fn stdin_text() -> anyhow::Result<String> {
    static STDIN: std::sync::OnceLock<Result<String, String>> = std::sync::OnceLock::new();
    STDIN
        .get_or_init(|| std::io::read_to_string(std::io::stdin()).map_err(|err| err.to_string()))
        .clone()
        .map_err(|err| anyhow::anyhow!("cannot read standard input: {err}"))
}
