//! Dry runs, cleanup and the journal

use super::*;

#[test]
fn dry_run_prints_the_plan_and_touches_nothing() {
    let case = Case::new();
    let out = case
        .run(
            "build\tmake\n",
            &[
                "--dry-run",
                "--env",
                "SECRET=hunter2",
                "--secret",
                "DEPLOY_TOKEN",
                "--cache",
                "deps=deps",
                "--cache-dir",
                &case.path("caches").display().to_string(),
            ],
        )
        .env("DEPLOY_TOKEN", "dry-run-secret-value")
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("dry-run-secret-value"), "{stdout}");
    for leaked in ["dry-run-secret-value", "hunter2"] {
        assert!(!stderr(&out).contains(leaked), "{}", stderr(&out));
    }
    assert!(
        stdout.contains("secrets for every step's environment: DEPLOY_TOKEN"),
        "{stdout}"
    );
    assert!(stdout.contains("environment: run folder"), "{stdout}");
    assert!(stdout.contains("sh -ec \"make\""), "{stdout}");
    assert!(!stdout.contains("hunter2"));
    for never in ["roots", "outputs", "result.json", "run.log", "caches"] {
        assert!(!case.path(never).exists(), "dry-run created {never}");
    }
}

#[test]
fn cleanup_subcommand_removes_crashed_run_folders() {
    let case = Case::new();
    let runner_dir = case
        .path("roots")
        .join(executor_core::labels::label_value("did:plc:cli-test"));
    std::fs::create_dir_all(runner_dir.join("crashed-run/work")).unwrap();
    let out = bin()
        .args([
            "cleanup",
            "--executor",
            "shell",
            "--runner",
            "did:plc:cli-test",
            "--shell-root",
        ])
        .arg(case.path("roots"))
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 removed"));
    assert!(!runner_dir.join("crashed-run").exists());
}

/// The journal beside the cache folder: what a run could not remove is
/// removed by the next cleanup of that runner, and forgotten.
#[test]
fn cleanup_sweeps_the_journal_beside_the_cache_folder() {
    let case = Case::new();
    let journal = executor_core::journal::Journal::new(case.path("journal"));
    journal
        .record(&executor_core::journal::Leftover::new(
            "shell",
            "did:plc:cli-test",
            "/gone/run-folder",
            "stop: did not finish",
        ))
        .unwrap();
    let out = bin()
        .args([
            "cleanup",
            "--executor",
            "shell",
            "--runner",
            "did:plc:cli-test",
        ])
        .arg("--shell-root")
        .arg(case.path("roots"))
        .arg("--cache-dir")
        .arg(case.path("caches"))
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("removed /gone/run-folder"), "{stdout}");
    assert!(journal
        .entries("shell", "did:plc:cli-test")
        .unwrap()
        .is_empty());
}

/// `run` sweeps the journal before it starts, as `cleanup` does: what an
/// earlier run of the same runner could not remove is removed and
/// forgotten, and another runner's entry is left for that runner.
#[test]
fn run_sweeps_the_journal_of_its_own_runner_first() {
    let case = Case::new();
    let journal = executor_core::journal::Journal::new(case.path("journal"));
    for (runner, id) in [
        ("did:plc:cli-test", "/gone/mine"),
        ("did:plc:someone-else", "/gone/theirs"),
    ] {
        journal
            .record(&executor_core::journal::Leftover::new(
                "shell",
                runner,
                id,
                "stop: did not finish",
            ))
            .unwrap();
    }
    let caches = case.path("caches").display().to_string();
    let out = case
        .run("hello\techo hi\n", &["--cache-dir", &caches])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(journal
        .entries("shell", "did:plc:cli-test")
        .unwrap()
        .is_empty());
    let theirs: Vec<String> = journal
        .entries("shell", "did:plc:someone-else")
        .unwrap()
        .into_iter()
        .map(|l| l.id)
        .collect();
    assert_eq!(theirs, ["/gone/theirs"]);
}
