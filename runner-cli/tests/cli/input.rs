//! Bad input is exit 2 with a message that names it

use super::*;

#[test]
fn control_characters_in_names_and_nul_in_steps_are_exit_2() {
    let case = Case::new();
    let out = case
        .run("a\ttrue\n", &["--name", "forged\n==> step x: success"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("control character"),
        "{}",
        stderr(&out)
    );

    let case = Case::new();
    let out = case.run("a\ttrue\nb\techo \0x\n", &[]).output().unwrap();
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("steps.tsv:2: a NUL byte"),
        "{}",
        stderr(&out)
    );

    let case = Case::new();
    let out = case
        .run("a\ttrue\n", &["--timeout", "99999999999999999999"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("--timeout"), "{}", stderr(&out));
    assert!(!case.path("roots").exists());
}

#[test]
fn untrusted_triggers_are_refused_on_the_shell_executor() {
    for trigger in ["pull", "queue"] {
        let case = Case::new();
        let out = case
            .run("x\ttouch \"$WORK_DIR/ran\"\n", &["--trigger", trigger])
            .output()
            .unwrap();
        assert_eq!(code(&out), 2);
        assert!(stderr(&out).contains("untrusted"), "{}", stderr(&out));
        assert!(!case.path("roots").exists(), "nothing may run");
        assert_eq!(case.result().status, executor_core::RunStatus::Error);
    }
}

#[test]
fn input_errors_exit_2_with_a_clear_message_and_a_result() {
    let case = Case::new();
    let out = case.run("no tab here\n", &[]).output().unwrap();
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("steps.tsv:1: no tab between the step name and its script"),
        "{}",
        stderr(&out)
    );
    assert_eq!(case.result().status, executor_core::RunStatus::Error);

    let case = Case::new();
    let out = case
        .run("a\ttrue\n", &["--workdir", "/no/such/checkout"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("--workdir /no/such/checkout"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        case.result().steps[0].status,
        executor_core::StepStatus::Skipped
    );

    let case = Case::new();
    let out = case
        .run("a\ttrue\n", &["--runner", "runner-without-did"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("not a DID"), "{}", stderr(&out));
}

#[test]
fn an_outputs_folder_that_is_not_new_is_exit_2_before_any_step() {
    // Files an earlier run left would be listed as this run's outputs.
    let case = Case::new();
    std::fs::create_dir(case.path("outputs")).unwrap();
    std::fs::write(case.path("outputs/stale.txt"), "old").unwrap();
    let out = case
        .run("mark\ttouch \"$WORK_DIR/../ran\"\n", &[])
        .output()
        .unwrap();
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("--outputs"), "{}", stderr(&out));
    assert!(stderr(&out).contains("is not empty"), "{}", stderr(&out));
    assert_eq!(
        case.result().steps[0].status,
        executor_core::StepStatus::Skipped
    );
    assert!(!case.path("roots").exists(), "a run folder was made");

    // A file where the folder should be: exit 2 at once too.
    let case = Case::new();
    std::fs::write(case.path("outputs"), "in the way").unwrap();
    let out = case.run("a\ttrue\n", &[]).output().unwrap();
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("is not a folder"), "{}", stderr(&out));
    assert!(!case.path("roots").exists(), "a run folder was made");
}

#[test]
fn usage_errors_exit_2_without_a_result() {
    let case = Case::new();
    let out = case
        .run("a\ttrue\n", &["--executor", "podman"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("invalid value 'podman'"),
        "{}",
        stderr(&out)
    );
    assert!(!case.path("result.json").exists());
}

#[test]
fn a_shell_root_other_users_can_change_is_exit_2_before_any_step() {
    use std::os::unix::fs::PermissionsExt;
    let case = Case::new();
    let shared = case.path("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let root = shared.join("roots").display().to_string();
    let out = case
        .run("a\techo the-step-ran\n", &["--shell-root", &root])
        .output()
        .unwrap();
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("not private"), "{}", stderr(&out));
    assert_eq!(case.result().status, executor_core::RunStatus::Error);
    assert!(!case.log().contains("the-step-ran"));
}

#[test]
fn input_errors_are_failures_of_kind_input() {
    let case = Case::new();
    let out = case
        .run("a\ttrue\n", &["--workdir", "/no/such/checkout"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let failure = case.result().failure.unwrap();
    assert_eq!(failure.kind, executor_core::FailureKind::Input);
    assert!(
        failure.message.contains("--workdir /no/such/checkout"),
        "{failure:?}"
    );
    // More retries than the flag allows is a usage error.
    let out = case.run("a\ttrue\n", &["--retry", "11"]).output().unwrap();
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("--retry"), "{}", stderr(&out));
}

#[test]
fn a_run_without_executor_is_refused_rather_than_run_on_the_host() {
    let case = Case::new();
    let out = bin()
        .args([
            "run",
            "--name",
            "x",
            "--runner",
            "did:plc:x",
            "--steps-file",
        ])
        .arg(case.steps("touched\ttouch \"$OUTPUTS_DIR/ran\"\n"))
        .arg("--outputs")
        .arg(case.path("outputs"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--executor"), "{stderr}");
    assert!(!case.path("outputs/ran").exists());
}

#[test]
fn another_backends_flags_are_refused_naming_this_ones() {
    let case = Case::new();
    for (extra, says) in [
        (
            &["--executor", "k8s", "--memory", "64m"][..],
            "on the k8s executor use --memory-limit",
        ),
        (
            &["--executor", "k8s", "--user", "1000:1000"][..],
            "use --run-as-user and --run-as-group",
        ),
        (
            &["--executor", "docker", "--run-as-user", "1000"][..],
            "on the docker executor use --user",
        ),
        (
            &["--executor", "shell", "--read-only"][..],
            "--read-only is a flag of the docker executor",
        ),
        (
            &["--executor", "shell", "--image", "x"][..],
            "--image is a flag of the docker and k8s executor",
        ),
    ] {
        let out = case.run("a\ttrue\n", extra).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {stderr}");
        assert!(stderr.contains(says), "{extra:?}: {stderr}");
        let result = case.result();
        assert_eq!(result.status, executor_core::RunStatus::Error, "{extra:?}");
    }
}

#[test]
fn dash_is_standard_input_or_output_and_two_outputs_there_are_refused() {
    use std::io::Write;
    let case = Case::new();
    // Steps from standard input, the result to standard output.
    let mut child = case
        .run("unused\ttrue\n", &["--steps-file", "-", "--result", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"hello\techo from-stdin\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: RunResult = serde_json::from_slice(&out.stdout).unwrap();
    assert_valid_result(&result);
    assert_eq!(result.steps[0].name, "hello");
    let log = std::fs::read_to_string(case.path("run.log")).unwrap();
    assert!(log.contains("from-stdin"), "{log}");
    // The log and the result both on standard output: refused.
    let out = case
        .run("a\ttrue\n", &["--log", "-", "--result", "-"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--log and --result are each `-`"),
        "{stderr}"
    );
}
