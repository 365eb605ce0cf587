//! The executor's branches over a mocked host, in milliseconds: no folder
//! is made and no process started.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use executor_core::tar::{UnpackError, UnpackSummary};
use executor_core::{
    CommandOutcome, Executor, ExecutorError, RunHandle, RunLog, RunSpec, Secret, Step, StepCommand,
};
use nix::unistd::Pid;
use tokio_util::sync::CancellationToken;

use crate::host::MockHost;
use crate::process::Finished;
use crate::root::RunRoot;
use crate::ShellExecutor;

const ROOT: &str = "/base/runner/run-1";

/// A host whose run folder is [`ROOT`], marked `m`.
fn host() -> MockHost {
    let mut host = MockHost::new();
    host.expect_create_run()
        .returning(|_, _| Ok(RunRoot::unlocked(ROOT.into(), "m".into())));
    host.expect_write_scripts().returning(|run, dir| {
        Ok(executor_core::script::ScriptFiles::planned(
            run,
            &dir.display().to_string(),
        ))
    });
    host
}

fn spec() -> (tempfile::TempDir, RunSpec) {
    let checkout = tempfile::tempdir().unwrap();
    let spec = RunSpec::new(
        "run",
        "did:plc:r",
        checkout.path(),
        checkout.path().join("out"),
    )
    .step(Step::new("s", "make"));
    (checkout, spec)
}

async fn start(executor: &ShellExecutor, spec: &RunSpec) -> Result<RunHandle, ExecutorError> {
    executor
        .start(spec, &RunLog::discard(), CancellationToken::new())
        .await
}

fn step(env: &[(&str, &str)]) -> StepCommand {
    StepCommand {
        id: executor_core::labels::random_hex(8),
        follow_from: None,
        upcoming: Vec::new(),
        name: "s".into(),
        script: "make".into(),
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

#[tokio::test]
async fn a_checkout_the_host_cannot_copy_removes_the_run_folder_before_start_returns() {
    let mut host = host();
    host.expect_copy()
        .times(1)
        .returning(|_, _, _| Err(UnpackError::TooLarge { limit: 1 }.into()));
    host.expect_remove_run()
        .withf(|root| root.path == Path::new(ROOT))
        .times(1)
        .returning(|_| Ok(()));
    let executor = ShellExecutor::with_host("/base", Arc::new(host));
    let (_checkout, spec) = spec();
    let err = start(&executor, &spec).await.unwrap_err();
    assert!(err.to_string().contains("copying the checkout"), "{err}");
    assert!(executor.runs().is_empty());
}

#[tokio::test]
async fn a_checkout_with_refused_entries_is_an_error_not_a_hole() {
    let mut host = host();
    host.expect_copy().times(1).returning(|_, _, _| {
        Ok(UnpackSummary {
            refused_count: 1,
            ..UnpackSummary::default()
        })
    });
    host.expect_remove_run().times(1).returning(|_| Ok(()));
    let executor = ShellExecutor::with_host("/base", Arc::new(host));
    let (_checkout, spec) = spec();
    let err = start(&executor, &spec).await.unwrap_err();
    assert!(err.to_string().contains("1 entries refused"), "{err}");
}

#[tokio::test]
async fn stop_kills_every_group_a_step_made_and_the_marked_rest_then_removes_the_folder() {
    let mut host = host();
    host.expect_copy()
        .returning(|_, _, _| Ok(UnpackSummary::default()));
    host.expect_run_step()
        .times(2)
        .returning(|_, _, _, _, _, groups| {
            groups.lock().unwrap().push(Pid::from_raw(4242));
            Ok(Finished {
                outcome: CommandOutcome::exited(0),
                lingering: Vec::new(),
                usage: None,
            })
        });
    host.expect_kill_run()
        .withf(|groups, mark| groups == [Pid::from_raw(4242), Pid::from_raw(4242)] && mark == "m")
        .times(1)
        .returning(|_, _| 0);
    host.expect_remove_run().times(1).returning(|_| Ok(()));
    let executor = ShellExecutor::with_host("/base", Arc::new(host));
    let (_checkout, spec) = spec();
    let handle = start(&executor, &spec).await.unwrap();
    for _ in 0..2 {
        let outcome = executor
            .command(
                &handle,
                &step(&[]),
                &RunLog::discard(),
                CancellationToken::new(),
            )
            .await
            .unwrap();
        assert_eq!(outcome, CommandOutcome::exited(0));
    }
    executor.stop(&handle).await.unwrap();
    // A second stop finds nothing live and touches nothing.
    executor.stop(&handle).await.unwrap();
}

#[tokio::test]
async fn secrets_and_the_run_mark_reach_the_step_environment_only() {
    let mut host = host();
    host.expect_copy()
        .returning(|_, _, _| Ok(UnpackSummary::default()));
    host.expect_run_step()
        .withf(|work_dir, step, script_file, _, _, _| {
            let has = |k: &str, v: &str| step.env.iter().any(|(a, b)| a == k && b == v);
            work_dir == Path::new(ROOT).join("work")
                && has("TOKEN", "s3cret")
                && has(crate::marked::MARK_VAR, "m")
                && has("MODE", "fast")
                && !step.script.contains("s3cret")
                // The script runs from the file written at start.
                && script_file
                    .as_deref()
                    .is_some_and(|f| f.starts_with(Path::new(ROOT).join("scripts")))
        })
        .times(1)
        .returning(|_, _, _, _, _, _| {
            Ok(Finished {
                outcome: CommandOutcome::exited(3),
                lingering: Vec::new(),
                usage: None,
            })
        });
    let executor = ShellExecutor::with_host("/base", Arc::new(host));
    let (_checkout, mut spec) = spec();
    spec.secrets.push(("TOKEN".into(), Secret::new("s3cret")));
    let handle = start(&executor, &spec).await.unwrap();
    let outcome = executor
        .command(
            &handle,
            &step(&[("MODE", "fast")]),
            &RunLog::discard(),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(outcome, CommandOutcome::exited(3));
}

#[tokio::test]
async fn a_step_of_a_run_this_executor_does_not_hold_is_a_lost_environment() {
    let mut host = MockHost::new();
    host.expect_run_step().times(0);
    let executor = ShellExecutor::with_host("/base", Arc::new(host));
    let handle = RunHandle {
        id: ROOT.into(),
        work_dir: format!("{ROOT}/work"),
        steps_dir: format!("{ROOT}/steps"),
        outputs_dir: format!("{ROOT}/outputs"),
    };
    let err = executor
        .command(
            &handle,
            &step(&[]),
            &RunLog::discard(),
            CancellationToken::new(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, ExecutorError::EnvironmentLost(_)), "{err}");
}

#[tokio::test]
async fn copies_outside_the_run_folder_are_refused_before_the_host_is_touched() {
    let mut host = MockHost::new();
    host.expect_copy().times(0);
    let executor = ShellExecutor::with_host("/base", Arc::new(host));
    let handle = RunHandle::in_container(ROOT);
    for path in ["/etc", &format!("{ROOT}/../other"), "/base/runner/run-10"] {
        let err = executor
            .copy_out(&handle, path, Path::new("/tmp/x"), Default::default())
            .await
            .unwrap_err();
        assert!(
            matches!(err, ExecutorError::InvalidInput(_)),
            "{path}: {err}"
        );
        let err = executor
            .copy_in(&handle, Path::new("/tmp/x"), path)
            .await
            .unwrap_err();
        assert!(
            matches!(err, ExecutorError::InvalidInput(_)),
            "{path}: {err}"
        );
    }
}

#[tokio::test]
async fn the_outputs_folder_comes_back_with_the_limits_the_caller_gave() {
    let mut host = MockHost::new();
    host.expect_copy()
        .withf(|from, to, limits| {
            from == Path::new(ROOT).join("outputs")
                && to == Path::new("/dest")
                && limits.max_entries == 7
        })
        .times(1)
        .returning(|_, _, _| Ok(UnpackSummary::default()));
    let executor = ShellExecutor::with_host("/base", Arc::new(host));
    let handle = RunHandle {
        outputs_dir: format!("{ROOT}/outputs"),
        ..RunHandle::in_container(ROOT)
    };
    let limits = executor_core::tar::UnpackLimits {
        max_entries: 7,
        ..Default::default()
    };
    executor
        .copy_out(&handle, &handle.outputs_dir, Path::new("/dest"), limits)
        .await
        .unwrap();
}

#[tokio::test]
async fn cleanup_removes_what_the_host_finds_dead() {
    let mut host = MockHost::new();
    host.expect_remove_dead()
        .withf(|base, runner| base == Path::new("/base") && runner == "did:plc:r")
        .times(1)
        .returning(|_, _| Ok(vec![format!("{ROOT}")]));
    let executor = ShellExecutor::with_host(PathBuf::from("/base"), Arc::new(host));
    let report = executor
        .cleanup("did:plc:r", Default::default())
        .await
        .unwrap();
    assert_eq!(report.removed, [ROOT]);
}
