//! `run --service` end to end: a service on Docker reached by name, the
//! same from a workflow file, a dry-run that shows it, and the shell's
//! refusal.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use executor_conformance::fixture::assert_valid_result;
use executor_core::{RunResult, RunStatus};

fn image() -> String {
    std::env::var("KNOTLESS_TEST_IMAGE").unwrap_or_else(|_| "knotless-busybox:local".into())
}

/// `run` of `steps` on `executor` in `dir`, then `extra`.
fn run(dir: &Path, executor: &str, steps: &str, extra: &[&str]) -> Output {
    std::fs::create_dir_all(dir.join("checkout")).unwrap();
    std::fs::write(dir.join("steps.tsv"), steps).unwrap();
    Command::new(env!("CARGO_BIN_EXE_runner-cli"))
        .env_remove("RUNNER_DID")
        .args(["run", "--executor", executor, "--name", "svc", "--runner"])
        .arg(format!("did:plc:svc-{}", std::process::id()))
        .arg("--workdir")
        .arg(dir.join("checkout"))
        .arg("--steps-file")
        .arg(dir.join("steps.tsv"))
        .arg("--outputs")
        .arg(dir.join("outputs"))
        .arg("--result")
        .arg(dir.join("result.json"))
        .arg("--log")
        .arg(dir.join("run.log"))
        .args(extra)
        .output()
        .unwrap()
}

fn result(dir: &Path) -> RunResult {
    let text = std::fs::read_to_string(dir.join("result.json")).expect("a result JSON");
    let result: RunResult = serde_json::from_str(&text).unwrap();
    assert_valid_result(&result);
    result
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

const WEB: &str = "web=echo \"$PAGE\" > /tmp/index.html; exec httpd -f -p 8080 -h /tmp";
/// The steps file decodes `\n`: the request's blank line ends in the script.
const GET: &str = "get\tprintf 'GET /index.html HTTP/1.0\\n\\n' | nc web 8080\n";

#[test]
fn the_shell_executor_refuses_services_naming_the_backends_that_have_them() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(
        dir.path(),
        "shell",
        "a\ttrue\n",
        &["--service", "db=postgres:16"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("service db: the shell executor")
            && stderr(&out).contains("--executor docker or --executor k8s"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        result(dir.path()).failure.map(|f| f.kind),
        Some(executor_core::FailureKind::Input)
    );
}

#[test]
fn a_flag_for_a_service_no_service_flag_names_is_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(
        dir.path(),
        "docker",
        "a\ttrue\n",
        &["--image", "x", "--service-ready", "db=tcp:5432"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--service-ready db: no --service db=IMAGE"),
        "{}",
        stderr(&out)
    );
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[test]
fn a_docker_run_reaches_its_service_by_name_from_flags_and_from_a_workflow() {
    let image = image();
    let dir = tempfile::tempdir().unwrap();
    let flags = [
        "--image",
        &image,
        "--pull",
        "never",
        "--service",
        &format!("web={image}"),
        "--service-command",
        WEB,
        "--service-env",
        "web:PAGE=page-from-flags",
        "--service-ready",
        "web=tcp:8080",
    ];
    let out = run(dir.path(), "docker", GET, &flags);
    let log = std::fs::read_to_string(dir.path().join("run.log")).unwrap_or_default();
    assert_eq!(out.status.code(), Some(0), "{}\n{log}", stderr(&out));
    assert!(log.contains("page-from-flags"), "{log}");
    assert_eq!(result(dir.path()).status, RunStatus::Success);

    // The same service from a workflow file.
    let dir = tempfile::tempdir().unwrap();
    let workflow = dir.path().join("workflow.yaml");
    std::fs::write(
        &workflow,
        format!(
            "services:\n  web:\n    image: {image}\n    command: {cmd:?}\n    env:\n      PAGE: page-from-yaml\n    ready: tcp:8080\n\
             steps:\n  - name: get\n    run: printf 'GET /index.html HTTP/1.0\\r\\n\\r\\n' | nc web 8080\n",
            cmd = WEB.trim_start_matches("web="),
        ),
    )
    .unwrap();
    std::fs::create_dir_all(dir.path().join("checkout")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_runner-cli"))
        .args([
            "run",
            "--executor",
            "docker",
            "--name",
            "svc-wf",
            "--image",
            &image,
            "--pull",
            "never",
        ])
        .arg("--runner")
        .arg(format!("did:plc:svc-wf-{}", std::process::id()))
        .arg("--workflow")
        .arg(&workflow)
        .arg("--workdir")
        .arg(dir.path().join("checkout"))
        .arg("--outputs")
        .arg(dir.path().join("outputs"))
        .arg("--result")
        .arg(dir.path().join("result.json"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}\n{stdout}", stderr(&out));
    assert!(stdout.contains("page-from-yaml"), "{stdout}");
}

#[test]
fn a_docker_dry_run_shows_the_service_and_never_its_variables() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(
        dir.path(),
        "docker",
        GET,
        &[
            "--image",
            "busybox",
            "--dry-run",
            "--service",
            "web=busybox",
            "--service-env",
            "web:PAGE=not-to-be-printed",
            "--service-ready",
            "web=tcp:8080",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}\n{stdout}", stderr(&out));
    assert!(
        stdout.contains("POST /containers/create?name=knotless-svc-"),
        "{stdout}"
    );
    assert!(stdout.contains("\"web\""), "{stdout}");
    assert!(stdout.contains("PAGE="), "{stdout}");
    assert!(!stdout.contains("not-to-be-printed"), "{stdout}");
}

/// The README's services example, run as written (the binary in place of
/// `cargo run`), in a folder where `examples` is the project's.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[test]
fn the_readme_services_example_runs_as_written() {
    let command = common::example_command("--service web=");
    let dir = common::beside_examples();
    let out = common::run_as_written(&command, dir.path());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out-svc/fetched.txt")).unwrap(),
        "hello from web\n"
    );
    let text = std::fs::read_to_string(dir.path().join("result-svc.json")).unwrap();
    let result: RunResult = serde_json::from_str(&text).unwrap();
    assert_valid_result(&result);
    assert_eq!(result.status, RunStatus::Success);
}
