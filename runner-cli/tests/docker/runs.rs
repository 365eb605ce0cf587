//! Runs as the README shows, dry runs and images

use super::*;

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[test]
fn the_example_runs_on_docker_as_the_readme_shows() {
    let dir = tempfile::tempdir().unwrap();
    let out = cli()
        .args([
            "run",
            "--executor",
            "docker",
            "--image",
            &image(),
            "--pull",
            "never",
        ])
        .args([
            "--network",
            "none",
            "--name",
            "example",
            "--runner",
            "did:plc:example-docker",
        ])
        .arg("--workdir")
        .arg(examples())
        .arg("--steps-file")
        .arg(examples().join("steps.tsv"))
        .arg("--outputs")
        .arg(dir.path().join("out"))
        .arg("--result")
        .arg(dir.path().join("result.json"))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = result(&dir.path().join("result.json"));
    assert_eq!(r.executor, "docker");
    assert!(r
        .outputs
        .iter()
        .any(|o| o.path == "badge.png" && o.media_type == "image/png"));
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[test]
fn dry_run_prints_every_call_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = cli()
        .env("DOCKER_HOST", "unix:///no/such/docker.sock")
        .args(["run", "--executor", "docker", "--image", &image()])
        .args(["--name", "dry", "--runner", "did:plc:dry", "--dry-run"])
        .args(["--env", "TOKEN=hunter2", "--cache", "deps=/deps"])
        .args(["--secret", "DEPLOY_TOKEN"])
        .args(["--cap-drop", "ALL", "--cap-add", "cap_chown", "--read-only"])
        .env("DEPLOY_TOKEN", "dry-run-secret-value")
        .arg("--cache-dir")
        .arg(dir.path().join("caches"))
        .arg("--outputs")
        .arg(dir.path().join("outputs"))
        .arg("--result")
        .arg(dir.path().join("result.json"))
        .arg("--workdir")
        .arg(examples())
        .arg("--steps-file")
        .arg(examples().join("steps.tsv"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(!stdout.contains("hunter2"), "{stdout}");
    assert!(!stdout.contains("dry-run-secret-value"), "{stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("dry-run-secret-value") && !stderr.contains("hunter2"),
        "{stderr}"
    );
    assert!(stdout.contains("DEPLOY_TOKEN=[MASKED]"), "{stdout}");
    for expected in [
        "\"PidsLimit\": 4096",
        "\"CapDrop\": [",
        "\"ALL\"",
        "\"CapAdd\": [",
        "\"CHOWN\"",
        "\"ReadonlyRootfs\": true",
        "PUT /containers/dry-run-container/archive?path=/work",
    ] {
        assert!(stdout.contains(expected), "{expected} missing:\n{stdout}");
    }
    for never in ["caches", "outputs", "result.json"] {
        assert!(!dir.path().join(never).exists(), "the dry-run made {never}");
    }
}

/// An image with no `sh` (here: busybox under another name, and nothing
/// else) fails the run once, as an image failure naming the shell, and
/// `--retry` does not burn attempts on it.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[test]
fn an_image_without_sh_is_an_image_failure_not_retried() {
    let dir = tempfile::tempdir().unwrap();
    let tag = format!("knotless-nosh:{}", std::process::id());
    common::import_image_without_sh(dir.path(), &tag);
    std::fs::create_dir(dir.path().join("checkout")).unwrap();
    let steps = dir.path().join("steps.tsv");
    std::fs::write(&steps, "a\ttrue\n").unwrap();
    let out = cli()
        .args([
            "run",
            "--executor",
            "docker",
            "--image",
            &tag,
            "--pull",
            "never",
        ])
        .args(["--name", "nosh", "--runner", "did:plc:nosh", "--retry", "2"])
        .arg("--workdir")
        .arg(dir.path().join("checkout"))
        .arg("--steps-file")
        .arg(&steps)
        .arg("--outputs")
        .arg(dir.path().join("outputs"))
        .arg("--result")
        .arg(dir.path().join("result.json"))
        .arg("--log")
        .arg(dir.path().join("run.log"))
        .output()
        .unwrap();
    let _ = Command::new("docker").args(["rmi", "-f", &tag]).output();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let result: RunResult =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("result.json")).unwrap())
            .unwrap();
    assert_valid_result(&result);
    let failure = result.failure.clone().expect("a failure");
    assert_eq!(failure.kind, executor_core::FailureKind::Image, "{stderr}");
    assert!(!failure.retryable, "{failure:?}");
    assert!(failure.message.contains("has no sh"), "{failure:?}");
    assert!(
        stderr.contains("--image"),
        "the flag, not the field: {stderr}"
    );
    assert_eq!(result.attempts.len(), 1, "{}", result.to_json());
    assert_eq!(
        out.status.code(),
        Some(executor_core::FailureKind::Image.exit_code())
    );
}

/// The README's Docker example, as written (the binary in place of `cargo
/// run`; the engine and image are the test run's, so its
/// `prepare-engine.sh` line is left out), in a folder where `examples` is
/// the project's.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[test]
fn the_readme_docker_example_runs_as_written() {
    let block = common::example("scripts/prepare-engine.sh");
    let command: String = block
        .lines()
        .filter(|l| !l.contains("prepare-engine.sh"))
        .collect::<Vec<_>>()
        .join("\n")
        .replace(
            "cargo run -p runner-cli --",
            env!("CARGO_BIN_EXE_runner-cli"),
        );
    let dir = common::beside_examples();
    let out = common::run_as_written(&command, dir.path());
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(dir.path().join("out/badge.png").is_file());
    let r = result(&dir.path().join("result.json"));
    assert_eq!(r.executor, "docker");
}

/// `--outputs-max` bounds what the outputs unpack to on the host, also
/// when they come back compressed: 64 MiB of zeros (a few hundred KiB
/// down the wire) are refused at 8 MiB, and the run fails naming it.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[test]
fn outputs_past_the_outputs_max_are_refused_as_they_inflate() {
    let dir = tempfile::tempdir().unwrap();
    let steps = dir.path().join("steps.tsv");
    std::fs::write(
        &steps,
        "bomb\thead -c 67108864 /dev/zero > \"$OUTPUTS_DIR/zeros\"\n",
    )
    .unwrap();
    let mut args = run_logging_to_stdout("outputs-max", "did:plc:outputs-max", dir.path(), &steps);
    args.extend(
        [
            "--compression",
            "always",
            "--outputs-max",
            "8m",
            "--outputs",
        ]
        .into_iter()
        .map(Into::into),
    );
    args.push(dir.path().join("out").into());
    let out = cli().args(&args).stderr(Stdio::piped()).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_ne!(out.status.code(), Some(0), "{stdout}");
    let result = result(&dir.path().join("result.json"));
    let failure = result.failure.expect("a failure");
    assert!(
        failure.message.contains("8388608 bytes"),
        "{}",
        failure.message
    );
    let landed = std::fs::metadata(dir.path().join("out/zeros")).map_or(0, |m| m.len());
    assert!(landed <= 8 << 20, "{landed} bytes landed");
}
