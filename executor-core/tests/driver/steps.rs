//! Steps: success, failure, timeouts and cancellation mid-step.

use super::*;

#[tokio::test]
async fn success() {
    let out = tempfile::tempdir().unwrap();
    let mut mock = started_mock();
    mock.expect_command()
        .times(2)
        .returning(|_, _, _, _| Ok(CommandOutcome::exited(0)));
    let result = drive(
        mock,
        false,
        &spec(out.path(), &["a", "b"]),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(result.status, RunStatus::Success);
    assert_eq!(result.error, None);
    assert_eq!(
        statuses(&result),
        [StepStatus::Success, StepStatus::Success]
    );
    assert_eq!(result.executor, "fake");
}

#[tokio::test]
async fn steps_see_standard_folders_then_run_then_step_variables() {
    let out = tempfile::tempdir().unwrap();
    let mut mock = started_mock();
    mock.expect_command()
        .withf(|_, step, _, _| {
            let keys: Vec<&str> = step.env.iter().map(|(k, _)| k.as_str()).collect();
            let runner = [
                "CI",
                "KNOTLESS_RUN_NAME",
                "KNOTLESS_STEP_NAME",
                "KNOTLESS_STEP_INDEX",
                "KNOTLESS_ATTEMPT",
                "KNOTLESS_JOB_STATUS",
            ];
            let value = |k: &str| {
                step.env
                    .iter()
                    .find(|(n, _)| n == k)
                    .map(|(_, v)| v.as_str())
            };
            keys[..3] == ["WORK_DIR", "STEPS_DIR", "OUTPUTS_DIR"]
                && keys[3..9] == runner
                && keys[9..] == ["R", "S", "STEP_OUTPUT", "GITHUB_OUTPUT"]
                && value("KNOTLESS_STEP_INDEX") == Some("0")
                && value("KNOTLESS_ATTEMPT") == Some("1")
                && value("KNOTLESS_JOB_STATUS") == Some("success")
                && value("STEP_OUTPUT") == Some("/dev/null")
                && step.argv() == ["sh", "-ec", "run a"]
        })
        .times(1)
        .returning(|_, _, _, _| Ok(CommandOutcome::exited(0)));
    let mut spec = spec(out.path(), &["a"]).env("R", "1");
    spec.steps[0] = spec.steps[0].clone().env("S", "2");
    let result = drive(mock, false, &spec, CancellationToken::new()).await;
    assert_eq!(result.status, RunStatus::Success);
}

#[tokio::test]
async fn step_failure_skips_the_rest_and_still_collects_outputs() {
    let out = tempfile::tempdir().unwrap();
    let mut mock = started_mock();
    let mut seq = mockall::Sequence::new();
    mock.expect_command()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _, _, _| Ok(CommandOutcome::exited(0)));
    mock.expect_command()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _, _, _| {
            Ok(CommandOutcome::Exited {
                code: 137,
                reason: Some("OOMKilled".into()),
            })
        });
    let result = drive(
        mock,
        false,
        &spec(out.path(), &["a", "b", "c"]),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(result.status, RunStatus::Failed);
    assert_eq!(
        statuses(&result),
        [StepStatus::Success, StepStatus::Failed, StepStatus::Skipped]
    );
    assert_eq!(result.steps[1].exit_code, Some(137));
    assert_eq!(result.steps[1].error.as_deref(), Some("OOMKilled"));
    assert_eq!(
        result.error.as_deref(),
        Some("step b exited 137: OOMKilled")
    );
}

#[tokio::test(start_paused = true)]
async fn step_timeout() {
    let out = tempfile::tempdir().unwrap();
    let mut mock = started_mock();
    mock.expect_command().times(1).returning(|_, _, _, token| {
        assert!(
            token.is_cancelled(),
            "the interrupt token must fire on a step timeout"
        );
        Ok(CommandOutcome::Interrupted)
    });
    let result = drive(
        mock,
        true,
        &spec(out.path(), &["slow", "next"]),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(result.status, RunStatus::Timeout);
    assert_eq!(
        statuses(&result),
        [StepStatus::Timeout, StepStatus::Skipped]
    );
    assert_eq!(result.steps[0].exit_code, None);
    assert!(
        result
            .error
            .as_deref()
            .unwrap_or("")
            .contains("step timeout"),
        "{:?}",
        result.error
    );
}

#[tokio::test(start_paused = true)]
async fn run_timeout() {
    let out = tempfile::tempdir().unwrap();
    let mut mock = started_mock();
    mock.expect_command()
        .times(1)
        .returning(|_, _, _, _| Ok(CommandOutcome::Interrupted));
    let mut spec = spec(out.path(), &["slow", "next"]);
    spec.run_timeout = Duration::from_secs(5);
    spec.step_timeout = Duration::from_secs(50);
    let result = drive(mock, true, &spec, CancellationToken::new()).await;
    assert_eq!(result.status, RunStatus::Timeout);
    assert_eq!(
        statuses(&result),
        [StepStatus::Timeout, StepStatus::Skipped]
    );
    assert!(
        result
            .error
            .as_deref()
            .unwrap_or("")
            .contains("run timeout"),
        "{:?}",
        result.error
    );
}

/// A command that never returns, even when interrupted.
struct IgnoresInterrupt(MockExecutor);

#[async_trait]
impl Executor for IgnoresInterrupt {
    fn kind(&self) -> &str {
        "fake"
    }
    async fn start(
        &self,
        r: &RunSpec,
        l: &RunLog,
        t: CancellationToken,
    ) -> Result<RunHandle, ExecutorError> {
        self.0.start(r, l, t).await
    }
    async fn command(
        &self,
        _: &RunHandle,
        _: &StepCommand,
        _: &RunLog,
        _: CancellationToken,
    ) -> Result<CommandOutcome, ExecutorError> {
        std::future::pending().await
    }
    async fn copy_in(&self, r: &RunHandle, s: &Path, p: &str) -> Result<(), ExecutorError> {
        self.0.copy_in(r, s, p).await
    }
    async fn copy_out(
        &self,
        r: &RunHandle,
        p: &str,
        d: &Path,
        l: UnpackLimits,
    ) -> Result<UnpackSummary, ExecutorError> {
        self.0.copy_out(r, p, d, l).await
    }
    async fn stop(&self, r: &RunHandle) -> Result<(), ExecutorError> {
        self.0.stop(r).await
    }
    async fn cleanup(&self, r: &str, s: CleanupScope) -> Result<CleanupReport, ExecutorError> {
        self.0.cleanup(r, s).await
    }
}

#[tokio::test(start_paused = true)]
async fn step_that_ignores_its_interrupt_is_abandoned_after_the_grace() {
    let out = tempfile::tempdir().unwrap();
    let fake = IgnoresInterrupt(started_mock());
    let result = run(
        &fake,
        &spec(out.path(), &["stuck"]),
        &RunLog::discard(),
        CancellationToken::new(),
    )
    .await;
    assert_valid_result(&result);
    assert_eq!(result.status, RunStatus::Timeout);
    assert_eq!(statuses(&result), [StepStatus::Timeout]);
    assert!(
        result
            .error
            .as_deref()
            .unwrap_or("")
            .contains("did not stop within"),
        "{:?}",
        result.error
    );
}

#[tokio::test]
async fn cancel_mid_step() {
    let out = tempfile::tempdir().unwrap();
    let mut mock = started_mock();
    mock.expect_command().times(1).returning(|_, _, _, token| {
        assert!(token.is_cancelled());
        Ok(CommandOutcome::Interrupted)
    });
    let fake = Fake {
        hang_in_command: true,
        ..Fake::new(mock)
    };
    let cancel = CancellationToken::new();
    let spec = spec(out.path(), &["a", "b"]);
    let canceller = async {
        fake.entered.notified().await;
        cancel.cancel();
    };
    let log = RunLog::discard();
    let (result, ()) = tokio::join!(run(&fake, &spec, &log, cancel.clone()), canceller);
    assert_valid_result(&result);
    assert_eq!(result.status, RunStatus::Cancelled);
    assert_eq!(
        statuses(&result),
        [StepStatus::Cancelled, StepStatus::Skipped]
    );
}

/// What a backend measured of a step reaches its result and end line; a
/// peak within a tenth of the environment's memory limit gets a warning,
/// one further from it none.
#[tokio::test]
async fn a_steps_usage_reaches_its_result_and_a_near_limit_peak_is_warned_of() {
    use executor_core::usage::StepUsage;
    let out = tempfile::tempdir().unwrap();
    let mut mock = started_mock();
    let mut seq = mockall::Sequence::new();
    for peak_mib in [60u64, 40] {
        mock.expect_command()
            .times(1)
            .in_sequence(&mut seq)
            .returning(move |_, _, log, _| {
                log.record_usage(StepUsage {
                    cpu_user_ms: 1500,
                    cpu_system_ms: 200,
                    max_rss_bytes: Some(peak_mib << 20),
                    memory_limit_bytes: Some(64 << 20),
                    environment_peak_bytes: None,
                });
                Ok(CommandOutcome::exited(0))
            });
    }
    let (log, text) = RunLog::memory();
    let fake = Fake::new(mock);
    let result = run(
        &fake,
        &spec(out.path(), &["near", "far"]),
        &log,
        CancellationToken::new(),
    )
    .await;
    assert_valid_result(&result);
    assert_eq!(
        result.steps[0].usage.and_then(|u| u.max_rss_bytes),
        Some(60 << 20)
    );
    let text = text.text();
    assert!(text.contains("==> step near: success (exit 0, "), "{text}");
    assert!(text.contains(", cpu 1.7s, peak 60 MiB)"), "{text}");
    assert_eq!(
        text.matches("came within 10 % of the environment's memory limit")
            .count(),
        1,
        "{text}"
    );
    assert!(
        text.contains("step near: its peak memory (60 MiB)"),
        "{text}"
    );
}

/// A run ends with a summary line for every step, skipped ones too.
#[tokio::test]
async fn a_run_ends_with_a_summary_of_every_step() {
    let out = tempfile::tempdir().unwrap();
    let mut mock = started_mock();
    let mut seq = mockall::Sequence::new();
    for code in [0, 3] {
        mock.expect_command()
            .times(1)
            .in_sequence(&mut seq)
            .returning(move |_, _, _, _| Ok(CommandOutcome::exited(code)));
    }
    let (log, text) = RunLog::memory();
    let fake = Fake::new(mock);
    let spec = spec(out.path(), &["build", "test", "deploy"]);
    let result = run(&fake, &spec, &log, CancellationToken::new()).await;
    assert_eq!(
        statuses(&result),
        [StepStatus::Success, StepStatus::Failed, StepStatus::Skipped]
    );
    let text = text.text();
    let summary = &text[text
        .find("==> summary:")
        .unwrap_or_else(|| panic!("{text}"))..];
    let lines: Vec<&str> = summary.lines().take(4).collect();
    assert!(lines[1].starts_with("==>   build   success ("), "{summary}");
    assert!(
        lines[2].starts_with("==>   test    failed (exit 3, "),
        "{summary}"
    );
    assert_eq!(lines[3], "==>   deploy  skipped", "{summary}");
}
