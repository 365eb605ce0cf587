//! An Actions workflow file of one job, run unchanged through the binary
//! on Docker and on the test cluster: its header (`jobs:`, `runs-on:`,
//! `container:`, `services:` with a health check, `env:`,
//! `timeout-minutes:`, `defaults.run`), step outputs, conditions,
//! `shell:`, `working-directory:`, the runner's variables, and a value
//! that looks like shell code staying text.

use std::path::Path;
use std::process::Output;

use executor_conformance::fixture::assert_valid_result;
use executor_core::{RunResult, RunStatus, StepStatus};
use kube_testcluster::{ClusterOptions, TestCluster};

fn image() -> String {
    std::env::var("KNOTLESS_TEST_IMAGE").unwrap_or_else(|_| "knotless-busybox:local".into())
}

/// What a pull request's title could hold: every way out of a string.
const TITLE: &str = "x'; echo INJECTED; '\"; rm -rf / # $(echo SUBST) `echo TICK`";
const TOKEN: &str = "tok-abcdef123456";

fn workflow(image: &str) -> String {
    format!(
        r#"name: ci
on:
  pull_request:
env:
  GREETING: hello
jobs:
  other:
    runs-on: ubuntu-latest
    steps:
      - run: echo other-job-must-not-run
  test:
    runs-on: ubuntu-latest
    needs: other
    container:
      image: {image}
      env:
        MODE: ci
    timeout-minutes: 5
    defaults:
      run:
        working-directory: src
    env:
      TOKEN: ${{{{ secrets.DEPLOY_TOKEN }}}}
      TITLE: ${{{{ env.PR_TITLE }}}}
    services:
      web:
        image: {image}
        command: echo "$PAGE" > /tmp/index.html; exec httpd -f -p 8080 -h /tmp
        env:
          PAGE: page-from-service
        ports: ['8080:8080']
        options: --health-cmd "wget -q -O /dev/null http://127.0.0.1:8080/index.html" --health-interval 2s
    steps:
      - id: version
        run: |
          echo "in $(pwd)"
          echo "number=1.2" >> "$GITHUB_OUTPUT"
          printf 'notes<<EOF\nline one\nline two\nEOF\n' >> "$STEP_OUTPUT"
          echo "ci=$CI step=$KNOTLESS_STEP_NAME index=$KNOTLESS_STEP_INDEX attempt=$KNOTLESS_ATTEMPT run=$KNOTLESS_RUN_NAME"
      - name: title
        run: |
          echo "title: ${{{{ env.PR_TITLE }}}}"
          echo 'single: ${{{{ env.PR_TITLE }}}}'
          echo "job title: $TITLE"
          test "$TOKEN" = "${{{{ secrets.DEPLOY_TOKEN }}}}" && echo token-matches
      - name: service
        run: printf 'GET /index.html HTTP/1.0\r\n\r\n' | nc web 8080
      - name: bash
        shell: bash
        continue-on-error: true
        run: echo in-bash
      - name: use
        working-directory: .
        env:
          TAG: v${{{{ steps.version.outputs.number }}}}
        run: |
          echo "tag $TAG in $(pwd)"
          echo "notes [${{{{ steps.version.outputs.notes }}}}]"
          exit 3
      - name: skipped
        run: echo skipped-must-not-run
      - name: on-release
        if: env.MODE == 'release'
        run: echo release-must-not-run
      - name: notify
        if: failure() && steps.version.outputs.number == '1.2'
        run: echo "notify ${{{{ job.status }}}}"
      - name: always
        if: always()
        run: echo always-ran
"#
    )
}

/// Runs the file on `executor` in `dir` (the checkout has `src/`), with
/// `extra` flags; returns the process's output and the run log.
fn run(dir: &Path, executor: &str, extra: &[&str], kubeconfig: Option<&Path>) -> (Output, String) {
    std::fs::create_dir_all(dir.join("checkout/src")).unwrap();
    std::fs::write(dir.join("ci.yaml"), workflow(&image())).unwrap();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_runner-cli"));
    if let Some(kubeconfig) = kubeconfig {
        cmd.env("KUBECONFIG", kubeconfig);
    }
    let out = cmd
        .env_remove("RUNNER_DID")
        .env("DEPLOY_TOKEN", TOKEN)
        .args([
            "run",
            "--executor",
            executor,
            "--name",
            "actions",
            "--runner",
        ])
        .arg(format!("did:plc:actions-{executor}-{}", std::process::id()))
        .args(["--secret", "DEPLOY_TOKEN", "--env"])
        .arg(format!("PR_TITLE={TITLE}"))
        .arg("--workflow")
        .arg(dir.join("ci.yaml"))
        .arg("--workdir")
        .arg(dir.join("checkout"))
        .arg("--outputs")
        .arg(dir.join("outputs"))
        .arg("--result")
        .arg(dir.join("result.json"))
        .arg("--log")
        .arg(dir.join("run.log"))
        .args(extra)
        .output()
        .unwrap();
    let log = std::fs::read_to_string(dir.join("run.log")).unwrap_or_default();
    (out, log)
}

fn check_the_run(dir: &Path, out: &Output, log: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}\n{log}");
    assert!(
        stderr.contains("runs-on: ubuntu-latest is read and ignored"),
        "{stderr}"
    );
    let result: RunResult =
        serde_json::from_str(&std::fs::read_to_string(dir.join("result.json")).unwrap()).unwrap();
    assert_valid_result(&result);
    use StepStatus::{Failed, Skipped, Success};
    let statuses: Vec<_> = result.steps.iter().map(|s| s.status).collect();
    assert_eq!(
        statuses,
        [Success, Success, Success, Failed, Failed, Skipped, Skipped, Success, Success],
        "{log}"
    );
    assert_eq!(result.status, RunStatus::Failed);
    assert_eq!(result.steps[3].exit_code, Some(127));
    assert_eq!(result.steps[4].exit_code, Some(3));
    for line in [
        "==> --workflow jobs: test: runs-on: ubuntu-latest is read and ignored",
        "in /work/src",
        "ci=true step=#1 run echo \"in $(pwd)\" index=0 attempt=1 run=actions",
        &format!("title: {TITLE}"),
        &format!("single: {TITLE}"),
        &format!("job title: {TITLE}"),
        "token-matches",
        "page-from-service",
        &format!("shell: bash: the image {} has no bash", image()),
        "tag v1.2 in /work",
        "notes [line one\nline two]",
        "notify failure",
        "always-ran",
    ] {
        assert!(log.contains(line), "{line:?} is not in the log:\n{log}");
    }
    for never in ["INJECTED\n", "\nSUBST", "\nTICK", "must-not-run\n", TOKEN] {
        assert!(!log.contains(never), "{never:?} is in the log:\n{log}");
    }
    let outputs = &result.steps[0].outputs;
    assert_eq!(outputs.get("number").map(String::as_str), Some("1.2"));
    assert_eq!(
        outputs.get("notes").map(String::as_str),
        Some("line one\nline two")
    );
}

#[test]
fn an_actions_file_runs_unchanged_on_docker() {
    let dir = tempfile::tempdir().unwrap();
    let (out, log) = run(
        dir.path(),
        "docker",
        &["--pull", "never", "--job", "test"],
        None,
    );
    check_the_run(dir.path(), &out, &log);

    // Several jobs and no --job: exit 2 naming them, before anything runs.
    let dir = tempfile::tempdir().unwrap();
    let (out, log) = run(dir.path(), "docker", &["--pull", "never"], None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("2 jobs (other, test): pick one with --job NAME"),
        "{stderr}"
    );
    assert!(!log.contains("step"), "{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_actions_file_runs_unchanged_on_the_test_cluster() {
    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = cluster.kubeconfig().to_path_buf();
    let path = dir.path().to_path_buf();
    let (out, log) = tokio::task::spawn_blocking(move || {
        run(&path, "k8s", &["--job", "test"], Some(&kubeconfig))
    })
    .await
    .unwrap();
    check_the_run(dir.path(), &out, &log);
}

/// `container: options:` are this runner's own flags of the same names:
/// taken on Docker, and on the shell executor refused as Docker's.
#[test]
fn container_options_are_the_runners_own_flags() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("checkout")).unwrap();
    let file = format!(
        "jobs:\n  t:\n    container:\n      image: {}\n      options: --add-host knotless-test:10.1.2.3 --cap-drop NET_RAW\n    steps:\n      - run: grep knotless-test /etc/hosts\n",
        image()
    );
    std::fs::write(dir.path().join("ci.yaml"), file).unwrap();
    let run = |executor: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_runner-cli"))
            .env_remove("RUNNER_DID")
            .args([
                "run",
                "--executor",
                executor,
                "--name",
                "options",
                "--runner",
            ])
            .arg(format!("did:plc:options-{}", std::process::id()))
            .arg("--workflow")
            .arg(dir.path().join("ci.yaml"))
            .arg("--workdir")
            .arg(dir.path().join("checkout"))
            .arg("--outputs")
            .arg(dir.path().join("outputs"))
            .arg("--result")
            .arg(dir.path().join("result.json"))
            .args(if executor == "docker" {
                &["--pull", "never"][..]
            } else {
                &[][..]
            })
            .output()
            .unwrap()
    };
    let out = run("docker");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("10.1.2.3") && stdout.contains("knotless-test"),
        "{stdout}"
    );
    let out = run("shell");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("container: options"), "{stderr}");
}
