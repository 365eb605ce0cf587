//! What a new user meets before any run: `--help` grouped per backend with
//! the exit codes, shell completions, and a `DOCKER_HOST` without a scheme.

use std::process::Command;

fn cli(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_runner-cli"))
        .env_remove("RUNNER_DID")
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn run_help_groups_flags_per_backend_and_names_the_exit_codes() {
    let out = cli(&["run", "--help"]);
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    let at = |heading: &str| {
        help.find(heading)
            .unwrap_or_else(|| panic!("{heading}:\n{help}"))
    };
    // Each backend's flags come under its heading.
    assert!(
        at("Docker (--executor docker):") < at("--pull <PULL>"),
        "{help}"
    );
    assert!(
        at("Kubernetes (--executor k8s):") < at("--memory-limit"),
        "{help}"
    );
    assert!(
        at("Services (docker, k8s):") < at("--service-ready"),
        "{help}"
    );
    assert!(
        at("Shell (--executor shell):") < at("--shell-root"),
        "{help}"
    );
    assert!(
        help.contains("Exit codes: 0 success, 1 a step failed, 2 usage or input error"),
        "{help}"
    );
}

/// `resume` and `cleanup` offer only what they use: the connection, and
/// for `resume` where its part of the run goes; nothing that bounds a
/// step or shapes a new environment.
#[test]
fn resume_and_cleanup_offer_only_their_own_flags() {
    for sub in ["resume", "cleanup"] {
        let out = cli(&[sub, "--help"]);
        assert_eq!(out.status.code(), Some(0));
        let help = String::from_utf8_lossy(&out.stdout);
        for offered in [
            "--runner",
            "--namespace",
            "--kubeconfig",
            "--reconnect-timeout",
        ] {
            assert!(help.contains(offered), "{sub} lacks {offered}:\n{help}");
        }
        for foreign in [
            "--memory",
            "--cpus",
            "--user",
            "--pull",
            "--cap-drop",
            "--read-only",
            "--memory-limit",
            "--cpu-request",
            "--node-selector",
            "--run-as-user",
            "--isolate",
            "--pod-timeout",
            "--image-pull-secret",
        ] {
            assert!(
                !help.contains(&format!("{foreign} ")) && !help.contains(&format!("{foreign}=")),
                "{sub} offers {foreign}:\n{help}"
            );
        }
        assert!(help.contains("Exit codes:"), "{sub}:\n{help}");
    }
    let out = cli(&[
        "resume",
        "--executor",
        "docker",
        "--runner",
        "did:plc:x",
        "--name",
        "x",
        "--log",
        "x.log",
        "--memory",
        "1g",
    ]);
    assert_eq!(out.status.code(), Some(2));
    // The shell's runs end with their runner: resume offers only the
    // backends it can carry a run on for.
    let help = String::from_utf8_lossy(&cli(&["resume", "--help"]).stdout).into_owned();
    assert!(
        help.contains("[possible values: docker, k8s]") && !help.contains("values: shell"),
        "{help}"
    );
    let out = cli(&[
        "resume",
        "--executor",
        "shell",
        "--runner",
        "did:plc:x",
        "--name",
        "x",
        "--log",
        "x.log",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("[possible values: docker, k8s]"));
}

#[test]
fn completions_are_printed_for_each_shell() {
    for (shell, says) in [
        ("bash", "_runner__cli()"),
        ("zsh", "#compdef runner-cli"),
        ("fish", "complete -c runner-cli"),
    ] {
        let out = cli(&["completions", shell]);
        assert_eq!(out.status.code(), Some(0), "{shell}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains(says) && text.contains("workflow"),
            "{shell}: {text}"
        );
    }
    let out = cli(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_docker_host_without_a_scheme_is_exit_2_saying_how_to_write_it() {
    let dir = tempfile::tempdir().unwrap();
    let steps = dir.path().join("steps.tsv");
    std::fs::write(&steps, "a\ttrue\n").unwrap();
    for (host, says) in [
        ("localhost:2375", "tcp://HOST:2375"),
        ("/var/run/docker.sock", "unix:///var/run/docker.sock"),
        ("ssh://me@host", "ssh -L"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_runner-cli"))
            .env("DOCKER_HOST", host)
            .args([
                "run",
                "--executor",
                "docker",
                "--image",
                "busybox",
                "--name",
                "h",
                "--runner",
                "did:plc:h",
            ])
            .arg("--steps-file")
            .arg(&steps)
            .arg("--result")
            .arg(dir.path().join("result.json"))
            .arg("--outputs")
            .arg(dir.path().join("out"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{host}: {err}");
        assert!(
            err.contains("DOCKER_HOST") && err.contains(says),
            "{host}: {err}"
        );
    }
}

/// `cleanup` names its backend as `run` does: there is no default to
/// fall back on silently.
#[test]
fn cleanup_without_an_executor_is_exit_2_naming_it() {
    let out = cli(&["cleanup", "--runner", "did:plc:x"]);
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("--executor"), "{said}");
}
