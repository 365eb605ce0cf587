//! The `run` and `cleanup` subcommands.

use std::path::Path;

use executor_core::events::JsonLines;
use executor_core::{
    run_with, CleanupScope, DriverOptions, Failure, FailureKind, RetryPolicy, RunLog, RunResult,
    StepResult,
};
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use std::sync::Arc;

use crate::args::DockerArgs;
use crate::args::{CleanupArgs, ExecutorKind, RunArgs};
use crate::backends::{self, BackendOptions, BuildError};
use crate::prepare::{plan_of, prepare};
use crate::result_file::write_result;
use crate::signals::{Abandon, Owner, Signals};
use crate::{EXIT_CANCELLED, EXIT_INFRA, EXIT_INPUT};

/// How long the end of a run waits for a log destination that takes no
/// bytes at all (a reader that stopped reading) before giving up on it.
const LOG_PATIENCE: std::time::Duration = std::time::Duration::from_secs(5);

/// Runs and returns the process exit code.
pub async fn run(args: RunArgs) -> i32 {
    let started_at = OffsetDateTime::now_utc();
    // First, before anything can take time: a signal while connecting or
    // cleaning up still ends the run as cancelled, with a result.
    let cancel = CancellationToken::new();
    let abandon = Arc::new(Abandon::default());
    match Signals::install() {
        Ok(signals) => {
            tokio::spawn(signals.cancel_on_signal(cancel.clone(), Arc::clone(&abandon)));
        }
        Err(err) => tracing::warn!(%err, "cannot listen for signals"),
    }
    let prepared = prepare(&args).and_then(|p| {
        let flags = crate::prepare::with_container_flags(&p.container_flags)?;
        Ok((p, flags))
    });
    let (spec, notes, args) = match prepared {
        Ok((prepared, with_flags)) => (prepared.spec, prepared.notes, with_flags.unwrap_or(args)),
        Err(err) => {
            say!("runner-cli: {err:#}");
            if !args.dry_run {
                write_unstarted_result(&args, started_at, input_failure(&err));
            }
            return EXIT_INPUT;
        }
    };
    if !args.dry_run {
        abandon.result(
            crate::signals::unfinished(
                &args.name,
                &args.runner,
                args.executor.name(),
                started_at,
                spec.steps.iter().map(|s| s.name.clone()),
            ),
            args.result.clone(),
        );
    }
    let options = BackendOptions {
        shell_root: args.shell_root.clone(),
        docker: &args.docker,
        k8s: &args.k8s,
        cap_add: &args.cap_add,
        untrusted: args.trigger.is_untrusted(),
        for_cleanup: false,
        dry_run: args.dry_run,
    };
    let built = tokio::select! {
        built = backends::build(args.executor, &options) => built,
        _ = cancel.cancelled() => return cancelled_before_start(&args, started_at, "connecting"),
    };
    let executor = match built {
        Ok(executor) => executor,
        Err(BuildError::Input(err)) => {
            say!("runner-cli: {err:#}");
            if !args.dry_run {
                write_unstarted_result(&args, started_at, input_failure(&err));
            }
            return EXIT_INPUT;
        }
        Err(BuildError::Infrastructure(err)) => {
            say!("runner-cli: {err}");
            let failure = err.failure(err.to_string());
            let code = failure.kind.exit_code();
            write_unstarted_result(&args, started_at, failure);
            return code;
        }
    };
    let log = if args.dry_run {
        RunLog::discard()
    } else if args.log == "-" {
        RunLog::stdout()
    } else {
        // With its mark: a runner killed from here on can be resumed.
        match RunLog::create_resumable(Path::new(&args.log)) {
            Ok(log) => log,
            Err(err) => {
                let msg = format!("cannot write the run log {}: {err}", args.log);
                say!("runner-cli: {msg}");
                write_unstarted_result(&args, started_at, Failure::new(FailureKind::Input, msg));
                return EXIT_INPUT;
            }
        }
    };
    if args.timestamps {
        log.timestamps();
    }
    for note in &notes {
        log.line(note);
    }
    log.limit_output(args.log_limit.0);
    log.reword(std::sync::Arc::new(|text: &str| {
        crate::flags::as_flags(text).into_owned()
    }));
    if args.log != "-" && !args.dry_run {
        log.add_sink(crate::progress::on_stderr());
    }
    if let Some(kind) = unresumable_log(&args) {
        say!(
            "runner-cli: --log {} is {kind}: the log is written into it, and this run cannot be resumed (no record, lock or mark is kept beside it)",
            args.log
        );
    } else if args.log != "-" && !args.dry_run {
        let record = crate::record::RunRecord::of(&args);
        if let Err(err) = record.write(Path::new(&args.log)) {
            say!(
                "runner-cli: cannot write the run's record {} ({err}); a resume of this run will need the flags given here",
                crate::record::path(Path::new(&args.log)).display()
            );
        }
    }
    if let (Some(path), false) = (&args.events, args.dry_run) {
        match events_sink(path, false) {
            Ok(sink) => log.add_sink(sink),
            Err(msg) => {
                say!("runner-cli: {msg}");
                write_unstarted_result(&args, started_at, Failure::new(FailureKind::Input, msg));
                return EXIT_INPUT;
            }
        }
    }

    let journal = crate::args::journal(args.cache_dir.as_deref());
    if !args.dry_run {
        abandon.owned_by(Owner {
            executor: args.executor.name(),
            runner: args.runner.clone(),
            journal: journal.clone(),
            cleanup: crate::signals::cleanup_command(
                args.executor,
                &args.runner,
                args.cache_dir.as_deref(),
                &args.k8s,
                args.shell_root.as_deref(),
            ),
        });
        log.add_sink(abandon.sink());
    }
    if !args.no_cleanup && !args.dry_run {
        let cleaned = tokio::select! {
            cleaned = async {
                // What earlier runs could not remove goes first, whatever its expiry.
                if let Err(err) = journal.sweep(executor.as_ref(), &spec.runner).await {
                    tracing::warn!(%err, "the journal of earlier runs could not be read; going on");
                }
                executor.cleanup(&spec.runner, CleanupScope::Expired).await
            } => cleaned,
            _ = cancel.cancelled() => {
                return cancelled_before_start(&args, started_at, "cleaning up earlier runs")
            }
        };
        if let Err(err) = cleaned {
            tracing::warn!(%err, "cleanup of earlier runs failed; going on");
        }
    }
    let cache_dir = args
        .cache_dir
        .clone()
        .unwrap_or_else(executor_core::CacheStore::default_dir);
    let cache_max = u64::try_from(args.cache_max).unwrap_or(u64::MAX);
    let driver = DriverOptions {
        caches: Some(if args.dry_run {
            executor_core::CacheStore::read_only(cache_dir, cache_max)
        } else {
            executor_core::CacheStore::new(cache_dir, cache_max)
        }),
        retry: RetryPolicy::retries(args.retry),
        journal: (!args.dry_run).then_some(journal),
        stop_timeout: stop_timeout(&args),
        output_limits: output_limits(args.outputs_max),
        ..DriverOptions::default()
    };
    let result = run_with(executor.as_ref(), &spec, &log, cancel, &driver).await;
    if args.dry_run {
        // What the run would be refused is said as it would be, exit 2;
        // anything else a dry run cannot tell.
        if result.failure.as_ref().map(|f| f.kind) == Some(executor_core::FailureKind::Input) {
            if let Some(error) = &result.error {
                say!(
                    "runner-cli: run {}: {}",
                    result.name,
                    crate::flags::as_flags(error)
                );
            }
            return 2;
        }
        return 0;
    }
    crate::outputs::mark(&args.outputs, &args.name);
    report(result, &log, &args.result, &args.log).await
}

/// What `--log` is when it is not a regular file a resume could carry on
/// (a device, a FIFO, `/dev/stdout`).
fn unresumable_log(args: &RunArgs) -> Option<&'static str> {
    if args.log == "-" || args.dry_run {
        return None;
    }
    executor_core::destination::Destination::of(Path::new(&args.log))
        .ok()
        .filter(|dest| !dest.is_file())
        .map(|dest| dest.kind())
}

/// The unpacker's limits for the outputs, at most `max` bytes.
pub(crate) fn output_limits(max: i64) -> executor_core::tar::UnpackLimits {
    executor_core::tar::UnpackLimits {
        max_bytes: u64::try_from(max).unwrap_or(u64::MAX),
        ..executor_core::tar::UnpackLimits::default()
    }
}

/// The sink of `--events PATH` (`-` for stdout): a file created, or with
/// `append` (a resumed run) written after what it holds.
pub(crate) fn events_sink(
    path: &str,
    append: bool,
) -> Result<std::sync::Arc<dyn executor_core::events::EventSink>, String> {
    if path == "-" {
        return Ok(std::sync::Arc::new(JsonLines::new(std::io::stdout())));
    }
    let opened = if append {
        JsonLines::append(Path::new(path))
    } else {
        JsonLines::create(Path::new(path))
    };
    match opened {
        Ok(sink) => Ok(std::sync::Arc::new(sink)),
        Err(err) => Err(format!("cannot write the events file {path}: {err}")),
    }
}

/// Writes the run's result to `path`, lets the log `log_name` drain, and
/// returns the process exit code: the end of `run` and of `resume`.
pub(crate) async fn report(
    mut result: RunResult,
    log: &RunLog,
    path: &Path,
    log_name: &str,
) -> i32 {
    // The result first: it is the record, and a log whose reader stopped
    // reading must not hold it back. It names the flags its reader set.
    result.edit_texts(|text| *text = crate::flags::as_flags(text).into_owned());
    let written = write_result(&result, path);
    if !log.flush(LOG_PATIENCE).await {
        say!(
            "runner-cli: the run log {log_name} took nothing for {LOG_PATIENCE:?}; its end is lost"
        );
    }
    if let Err(err) = written {
        say!("runner-cli: {err}");
        return EXIT_INFRA;
    }
    if let Some(error) = &result.error {
        say!("runner-cli: run {}: {error}", result.name);
    }
    result.exit_code()
}

/// How long `stop` may take: the removal riding out an outage of up to
/// `--reconnect-timeout`, then, on Kubernetes, the pod's removal.
fn stop_timeout(args: &RunArgs) -> std::time::Duration {
    stop_timeout_of(args.executor, &args.k8s)
}

pub(crate) fn stop_timeout_of(
    executor: ExecutorKind,
    k8s: &crate::args::K8sArgs,
) -> std::time::Duration {
    let reconnect = k8s.reconnect_timeout;
    match executor {
        ExecutorKind::K8s => {
            reconnect.saturating_add(executor_k8s::K8sOptions::default().stop_timeout)
        }
        ExecutorKind::Docker => reconnect.saturating_add(executor_core::DEFAULT_GRACE),
        ExecutorKind::Shell => executor_core::DEFAULT_GRACE,
    }
}

/// A signal before the run began: nothing of it exists yet, so the result
/// says cancelled with every step skipped.
fn cancelled_before_start(args: &RunArgs, started_at: OffsetDateTime, during: &str) -> i32 {
    let msg = format!("cancelled while {during}, before the run started");
    say!("runner-cli: {msg}");
    if !args.dry_run {
        write_unstarted_result(args, started_at, Failure::new(FailureKind::Cancelled, msg));
    }
    EXIT_CANCELLED
}

fn input_failure(err: &anyhow::Error) -> Failure {
    Failure::new(FailureKind::Input, format!("{err:#}"))
}

/// The result of a run that never started: bad input, no engine to start
/// it on, or a signal while connecting.
fn write_unstarted_result(args: &RunArgs, started_at: OffsetDateTime, failure: Failure) {
    let steps = plan_of(args)
        .map(|plan| {
            plan.steps
                .iter()
                .map(|s| StepResult::skipped(&s.name))
                .collect()
        })
        .unwrap_or_default();
    let mut result = RunResult {
        name: args.name.clone(),
        runner: args.runner.clone(),
        executor: args.executor.name().to_string(),
        status: failure.kind.run_status(),
        error: Some(failure.message.clone()),
        failure: Some(failure),
        started_at,
        finished_at: OffsetDateTime::now_utc(),
        steps,
        outputs: Vec::new(),
        refused: Vec::new(),
        caches: Vec::new(),
        phases: Default::default(),
        attempts: Vec::new(),
    };
    result.mask(&crate::secrets::masker());
    result.edit_texts(|text| *text = crate::flags::as_flags(text).into_owned());
    if let Err(err) = write_result(&result, &args.result) {
        say!("runner-cli: {err}");
    }
}

/// Runs `cleanup` and returns the exit code.
pub async fn cleanup(args: CleanupArgs) -> i32 {
    let docker = DockerArgs::default();
    let mut k8s = crate::args::k8s_defaults();
    args.reach.over(&mut k8s);
    let options = BackendOptions {
        shell_root: args.shell_root.clone(),
        docker: &docker,
        k8s: &k8s,
        cap_add: &[],
        untrusted: false,
        for_cleanup: true,
        dry_run: false,
    };
    let executor = match backends::build(args.executor, &options).await {
        Ok(e) => e,
        Err(BuildError::Input(err)) => {
            say!("runner-cli: {err:#}");
            return EXIT_INPUT;
        }
        Err(BuildError::Infrastructure(err)) => {
            say!("runner-cli: {err:#}");
            return EXIT_INFRA;
        }
    };
    if !args.runner.starts_with("did:") {
        say!(
            "runner-cli: --runner {:?} is not a DID (did:METHOD:ID)",
            args.runner
        );
        return EXIT_INPUT;
    }
    let scope = if args.force {
        CleanupScope::All
    } else {
        CleanupScope::Expired
    };
    let journal = crate::args::journal(args.cache_dir.as_deref());
    let swept = match journal.sweep(executor.as_ref(), &args.runner).await {
        Ok(swept) => swept,
        Err(err) => {
            say!("runner-cli: cleanup: {err}");
            return EXIT_INFRA;
        }
    };
    match executor.cleanup(&args.runner, scope).await {
        Ok(report) => {
            for removed in swept.iter().chain(&report.removed) {
                print_out!("removed {removed}");
            }
            print_out!("{} removed", swept.len() + report.removed.len());
            0
        }
        Err(err) => {
            say!("runner-cli: cleanup: {err}");
            EXIT_INFRA
        }
    }
}
