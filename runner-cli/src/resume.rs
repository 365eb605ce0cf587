//! The `resume` subcommand: carry on a run whose runner was killed.

use executor_core::resume::resume_with;
use executor_core::{DriverOptions, RunLog};
use tokio_util::sync::CancellationToken;

use crate::args::{DockerArgs, ExecutorKind, ResumeArgs};
use crate::backends::{self, BackendOptions, BuildError};
use crate::record::RunRecord;
use crate::run::{report, stop_timeout_of};
use crate::signals::{Abandon, Owner, Signals};
use crate::EXIT_INPUT;
use std::sync::Arc;

/// Resumes and returns the process exit code: the run's own, as `run`
/// would have returned it; 2 when there is nothing to resume.
pub async fn resume(args: ResumeArgs) -> i32 {
    match executor_core::destination::Destination::of(&args.log) {
        Ok(dest) if !dest.is_file() => {
            say!(
                "runner-cli: --log {} is {}, not a log file a run wrote: a run whose log is not a regular file keeps no mark and cannot be resumed",
                args.log.display(),
                dest.kind()
            );
            return EXIT_INPUT;
        }
        _ => {}
    }
    let record = match RunRecord::read(&args.log) {
        Ok(record) => record,
        Err(msg) => {
            say!("runner-cli: --log {}: {msg}", args.log.display());
            return EXIT_INPUT;
        }
    };
    if let Some(record) = &record {
        if record.name != args.name || record.runner != args.runner {
            say!(
                "runner-cli: --log {} is the log of run {:?} of runner {}, not of --name {:?} --runner {}; give the log of the run to resume",
                args.log.display(),
                record.name,
                record.runner,
                args.name,
                args.runner
            );
            return EXIT_INPUT;
        }
    }
    let args = Resume::from(args, record);
    let cancel = CancellationToken::new();
    let abandon = Arc::new(Abandon::default());
    match Signals::install() {
        Ok(signals) => {
            tokio::spawn(signals.cancel_on_signal(cancel.clone(), Arc::clone(&abandon)));
        }
        Err(err) => tracing::warn!(%err, "cannot listen for signals"),
    }
    let secrets = match crate::secrets::from_environment(&args.secrets).and_then(|mut s| {
        s.extend(crate::secrets::from_files(&args.secret_files)?);
        Ok(s)
    }) {
        Ok(secrets) => secrets,
        Err(err) => {
            say!("runner-cli: {err:#}");
            return EXIT_INPUT;
        }
    };
    let masker = executor_core::Masker::new(secrets.iter().map(|(_, v)| v));
    crate::secrets::mask_from_now_on(&masker);
    // Read first, and refused before anything is asked of the engine.
    match executor_core::resume::Mark::read(&args.log) {
        Ok(mark) if mark.run_finished => {
            say!(
                "runner-cli: run {} already finished: --log {} says so, and its result was written",
                args.name,
                args.log.display()
            );
            return EXIT_INPUT;
        }
        Ok(_) => {}
        Err(err) => {
            say!(
                "runner-cli: --log {}: its mark {} cannot be read ({err}); only a log that `runner-cli run --log FILE` wrote can be resumed",
                args.log.display(),
                executor_core::resume::mark_path(&args.log).display()
            );
            return EXIT_INPUT;
        }
    }
    let docker = DockerArgs::default();
    let options = BackendOptions {
        shell_root: None,
        docker: &docker,
        k8s: &args.k8s,
        cap_add: &[],
        untrusted: false,
        for_cleanup: false,
        dry_run: false,
    };
    let executor = match backends::build(args.executor, &options).await {
        Ok(executor) => executor,
        Err(BuildError::Input(err)) => {
            say!("runner-cli: {err:#}");
            return EXIT_INPUT;
        }
        Err(BuildError::Infrastructure(err)) => {
            say!("runner-cli: {err}");
            return err.failure(err.to_string()).kind.exit_code();
        }
    };
    let live = tokio::select! {
        live = executor.reattach(&args.runner, &args.name) => live,
        _ = cancel.cancelled() => {
            say!("runner-cli: cancelled while finding run {}; it is left as it was", args.name);
            return crate::EXIT_CANCELLED;
        }
    };
    let live = match live {
        Ok(live) => live,
        Err(err @ executor_core::ExecutorError::InvalidInput(_)) => {
            say!("runner-cli: resume: {err}");
            return EXIT_INPUT;
        }
        Err(err) => {
            say!("runner-cli: resume: {err}");
            return err.failure(err.to_string()).kind.exit_code();
        }
    };
    abandon.owned_by(Owner {
        executor: args.executor.name(),
        runner: args.runner.clone(),
        journal: crate::args::journal(args.cache_dir.as_deref()),
        cleanup: crate::signals::cleanup_command(
            args.executor,
            &args.runner,
            args.cache_dir.as_deref(),
            &args.k8s,
            None,
        ),
    });
    abandon.environment(&live.handle.id);
    let spec = match live.plan.clone().into_spec(args.outputs.clone(), secrets) {
        Ok(spec) => spec,
        Err(err) => {
            say!(
                "runner-cli: resume: {}; run {} is left as it was",
                crate::flags::as_flags(&err.to_string()),
                args.name
            );
            return EXIT_INPUT;
        }
    };
    let (log, mark) = match RunLog::resume(&args.log) {
        Ok(opened) => opened,
        Err(err) => {
            say!("runner-cli: --log {}: {err}", args.log.display());
            return EXIT_INPUT;
        }
    };
    if args.timestamps {
        log.timestamps();
    }
    log.limit_output(args.log_limit.0);
    log.reword(std::sync::Arc::new(|text: &str| {
        crate::flags::as_flags(text).into_owned()
    }));
    log.add_sink(crate::progress::on_stderr());
    log.add_sink(abandon.sink());
    if let Some(path) = &args.events {
        match crate::run::events_sink(path, true) {
            Ok(sink) => log.add_sink(sink),
            Err(msg) => {
                say!("runner-cli: {msg}; run {} is left as it was", args.name);
                return EXIT_INPUT;
            }
        }
    }
    let cache_dir = args
        .cache_dir
        .clone()
        .unwrap_or_else(executor_core::CacheStore::default_dir);
    let driver = DriverOptions {
        caches: Some(executor_core::CacheStore::new(
            cache_dir,
            u64::try_from(args.cache_max).unwrap_or(u64::MAX),
        )),
        journal: Some(crate::args::journal(args.cache_dir.as_deref())),
        stop_timeout: stop_timeout_of(args.executor, &args.k8s),
        output_limits: crate::run::output_limits(args.outputs_max),
        ..DriverOptions::default()
    };
    let result = resume_with(
        executor.as_ref(),
        &live,
        &spec,
        &mark,
        &log,
        cancel,
        &driver,
    )
    .await;
    crate::outputs::mark(&args.outputs, &result.name);
    report(result, &log, &args.result, &args.log.display().to_string()).await
}

/// What a resume goes on with: its flags, and for those not given, the
/// run's record (else `run`'s defaults).
struct Resume {
    executor: ExecutorKind,
    runner: String,
    name: String,
    log: std::path::PathBuf,
    outputs: std::path::PathBuf,
    result: std::path::PathBuf,
    timestamps: bool,
    log_limit: crate::args::LogLimit,
    events: Option<String>,
    secrets: Vec<String>,
    secret_files: Vec<(String, std::path::PathBuf)>,
    cache_dir: Option<std::path::PathBuf>,
    cache_max: i64,
    outputs_max: i64,
    k8s: crate::args::K8sArgs,
}

impl Resume {
    fn from(args: ResumeArgs, record: Option<RunRecord>) -> Self {
        let mut k8s = crate::args::k8s_defaults();
        if let Some(record) = &record {
            record.reach(&mut k8s);
        }
        args.reach.over(&mut k8s);
        if let Some(record) = &record {
            let missing = record.insecure_flags_beyond(&k8s);
            if !missing.is_empty() {
                say!(
                    "runner-cli: the run's record says it was given {}; resume turns an insecure transport on only when its own command line names it",
                    missing.join(" and ")
                );
            }
        }
        let mut secrets = record
            .as_ref()
            .map(|r| r.secrets.clone())
            .unwrap_or_default();
        for name in args.secrets {
            if !secrets.contains(&name) {
                secrets.push(name);
            }
        }
        let mut secret_files = record
            .as_ref()
            .map(|r| r.secret_files.clone())
            .unwrap_or_default();
        for file in args.secret_files {
            if !secret_files.contains(&file) {
                secret_files.push(file);
            }
        }
        Resume {
            executor: args.executor,
            runner: args.runner,
            name: args.name,
            outputs: args
                .outputs
                .or_else(|| record.as_ref().map(|r| r.outputs.clone()))
                .unwrap_or_else(|| "outputs".into()),
            result: args
                .result
                .or_else(|| record.as_ref().map(|r| r.result.clone()))
                .unwrap_or_else(|| "result.json".into()),
            timestamps: args.timestamps || record.as_ref().is_some_and(|r| r.timestamps),
            log_limit: args
                .log_limit
                .or_else(|| record.as_ref().map(|r| crate::args::LogLimit(r.log_limit)))
                .unwrap_or(crate::args::LogLimit(Some(64 << 20))),
            events: args
                .events
                .or_else(|| record.as_ref().and_then(|r| r.events.clone())),
            secrets,
            secret_files,
            cache_dir: args
                .cache_dir
                .or_else(|| record.as_ref().and_then(|r| r.cache_dir.clone())),
            cache_max: args
                .cache_max
                .or_else(|| record.as_ref().map(|r| r.cache_max))
                .unwrap_or(10 << 30),
            outputs_max: args
                .outputs_max
                .or_else(|| record.as_ref().map(|r| r.outputs_max))
                .unwrap_or(10 << 30),
            log: args.log,
            k8s,
        }
    }
}
