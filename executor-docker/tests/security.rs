//! The container's limits for untrusted steps, on the real engine.

mod common;

use common::Docker;
use executor_conformance::fixture::{assert_nothing_left, run_to_end, write, Fixture};
use executor_conformance::Backend;
use executor_core::{CleanupScope, Executor, RunLog, RunStatus, Step, StepStatus, Trust};
use executor_docker::DockerOptions;
use tokio_util::sync::CancellationToken;

async fn docker(options: DockerOptions) -> Docker {
    Docker(common::executor(options).await)
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_cannot_hold_more_processes_than_the_pids_limit() {
    let backend = docker(DockerOptions {
        pids_limit: Some(64),
        ..common::options()
    })
    .await;
    let fx = Fixture::new("pids");
    // A slow fork bomb: 200 sleepers, far past the limit. They hold no
    // output of the step's: a step whose leftovers hold it can lose its
    // last bytes (the ignored conformance case
    // a_step_that_leaves_a_process_holding_its_output_ends_with_all_it_wrote),
    // and the shell's "can't fork" is what this case reads.
    let spec = fx.spec(&backend, "pids").step(Step::new(
        "bomb",
        "i=0; while [ $i -lt 200 ]; do sleep 600 > /dev/null 2>&1 & i=$((i+1)); done; echo all-forked",
    ));
    let (result, log) = run_to_end(&backend, &spec).await;
    let text = log.text();
    assert_eq!(result.status, RunStatus::Failed, "{text}");
    assert_eq!(result.steps[0].status, StepStatus::Failed);
    assert!(!text.contains("all-forked"), "{text}");
    assert!(text.contains("fork"), "{text}");
    assert_nothing_left(&backend, &fx.runner).await;
}

/// What a step leaves behind once the step has ended: a filler that
/// forks sleepers until the container has no pid left, so that nothing
/// the runner starts can fork. Its own death frees one pid, which each
/// try of the runner's takes and gives back. The step channel the step
/// came through holds its pid from before the step (a start opened ahead
/// at its gate did once, and the filler waited for it by a pattern its
/// own command line matched).
const FILL_AFTER_THE_END: &str =
    "( until [ -n \"$(cat /.knotless/stepio-*.status 2>/dev/null)\" ]; do sleep 0.01; done; \
     while :; do sleep 600 & done ) & echo filling; echo to-the-end >&2; exit 3";

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_that_leaves_no_pid_free_ends_with_its_own_code_and_nothing_left() {
    let backend = docker(DockerOptions {
        pids_limit: Some(64),
        ..common::options()
    })
    .await;
    let fx = Fixture::new("pidsfull");
    let spec = fx
        .spec(&backend, "pidsfull")
        .step(Step::new("fill", FILL_AFTER_THE_END))
        .step(Step::new("after", "echo the-next-step-ran"));
    let (result, log) = run_to_end(&backend, &spec).await;
    let text = log.text();
    assert_eq!(result.status, RunStatus::Failed, "{text}");
    assert_eq!(result.steps[0].status, StepStatus::Failed, "{text}");
    assert_eq!(result.steps[0].exit_code, Some(3), "{text}");
    assert!(text.contains("filling\n"), "{text}");
    assert!(text.contains("to-the-end\n"), "{text}");
    // Whether the runner had to kill the step's processes to read how it
    // ended depends on how many pids the filler left: one freed pid lets
    // a follow start but not fork (then it kills, as
    // detached::tests::a_step_whose_environment_runs_nothing_more_is_killed_and_its_status_read
    // shows on the host's shells), two let it run. Either way the step's
    // own code comes back and nothing is left.
    // An engine's answer to an exec it could not start is the runner's
    // to tell, never the step's output.
    let output = text.lines().filter(|l| !l.starts_with("==> "));
    assert!(!output.clone().any(|l| l.contains("OCI runtime")), "{text}");
    assert_nothing_left(&backend, &fx.runner).await;
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_pids_limit_is_set() {
    let backend = docker(common::options()).await;
    let fx = Fixture::new("pidsdefault");
    let spec = fx.spec(&backend, "pidsdefault").step(Step::new(
        "limit",
        "cat /sys/fs/cgroup/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids/pids.max",
    ));
    let (result, log) = run_to_end(&backend, &spec).await;
    assert_eq!(result.status, RunStatus::Success, "{}", log.text());
    let want = format!("\n{}\n", executor_docker::DEFAULT_PIDS_LIMIT);
    assert!(log.text().contains(&want), "{}", log.text());
    assert_nothing_left(&backend, &fx.runner).await;
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_capabilities_are_gone_and_added_ones_are_there() {
    let backend = docker(DockerOptions {
        cap_drop: vec!["ALL".into()],
        cap_add: vec!["CHOWN".into()],
        ..common::options()
    })
    .await;
    let fx = Fixture::new("caps");
    let spec = fx.spec(&backend, "caps").step(Step::new(
        "caps",
        "grep CapEff /proc/self/status; touch f; chown 1234 f; \
         if chgrp 1234 f 2>/dev/null && mknod d c 1 3 2>/dev/null; then echo mknod-worked; exit 1; fi",
    ));
    let (result, log) = run_to_end(&backend, &spec).await;
    let text = log.text();
    assert_eq!(result.status, RunStatus::Success, "{text}");
    // CAP_CHOWN is bit 0 and nothing else.
    assert!(text.contains("CapEff:\t0000000000000001"), "{text}");
    assert_nothing_left(&backend, &fx.runner).await;
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_root_still_gets_its_checkout_tmp_and_outputs() {
    let backend = docker(DockerOptions {
        read_only: true,
        user: Some("1000:1000".into()),
        ..common::options()
    })
    .await;
    let fx = Fixture::new("readonly");
    write(&fx.checkout(), "src/app.txt", "the checkout");
    write(&fx.steps(), "build.sh", "echo shared step");
    let spec = fx.spec(&backend, "readonly").step(Step::new(
        "build",
        "cat src/app.txt; sh \"$STEPS_DIR/build.sh\"; echo scratch > /tmp/t && cat /tmp/t; \
         if touch /etc/planted 2>/dev/null; then echo root-is-writable; exit 1; fi; \
         echo made > \"$OUTPUTS_DIR/artifact\"",
    ));
    let (result, log) = run_to_end(&backend, &spec).await;
    let text = log.text();
    assert_eq!(result.status, RunStatus::Success, "{text}");
    assert!(
        text.contains("the checkoutshared step\nscratch\n"),
        "{text}"
    );
    assert_eq!(
        std::fs::read_to_string(fx.outputs().join("artifact")).unwrap(),
        "made\n"
    );
    assert_nothing_left(&backend, &fx.runner).await;
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_pinned_by_digest_is_pulled_as_a_digest() {
    // No registry answers here, so the pull fails; it must fail as a pull
    // of that digest, not as a malformed reference.
    let backend = docker(DockerOptions {
        pull: executor_docker::PullPolicy::Missing,
        ..common::options()
    })
    .await;
    let fx = Fixture::new("digest");
    let image = format!("knotless-busybox@sha256:{}", "ab".repeat(32));
    let mut spec = fx.spec(&backend, "digest").step(Step::new("never", "true"));
    spec.image = Some(image.clone());
    let (result, _) = run_to_end(&backend, &spec).await;
    let error = result.error.unwrap_or_default();
    assert!(!error.contains("invalid reference format"), "{error}");
    assert!(error.contains(&image), "{error}");
    assert_nothing_left(&backend, &fx.runner).await;
}

/// A container on the engine's default bridge, as another run's (or any
/// other workload's) would be: serves `hi` on port 8080; removed on drop.
struct Neighbour(String);

impl Neighbour {
    fn start() -> Self {
        let out = std::process::Command::new("docker")
            .args(["run", "-d", "--rm", "--network", "bridge"])
            .arg(
                std::env::var("KNOTLESS_TEST_IMAGE")
                    .unwrap_or_else(|_| "knotless-busybox:local".into()),
            )
            .args([
                "sh",
                "-c",
                "mkdir /www && echo hi > /www/index.html && exec httpd -f -p 8080 -h /www",
            ])
            .output()
            .expect("docker runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Neighbour(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    fn address(&self) -> String {
        let out = std::process::Command::new("docker")
            .args(["inspect", "-f", "{{.NetworkSettings.IPAddress}}", &self.0])
            .output()
            .expect("docker runs");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for Neighbour {
    fn drop(&mut self) {
        let _ = std::process::Command::new("docker")
            .args(["rm", "-f", &self.0])
            .output();
    }
}

/// An untrusted run (`Trust::Untrusted`, `--trigger pull`) gets a bridge
/// network of its own and loses the capabilities a build does not need:
/// it cannot reach a container on the engine's default bridge, which a
/// trusted run on that bridge can, and it has no raw sockets. Its network
/// goes with it.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_run_reaches_no_other_container_and_has_no_raw_sockets() {
    let neighbour = Neighbour::start();
    let address = neighbour.address();
    assert!(!address.is_empty(), "the neighbour has no address");
    let backend = docker(DockerOptions {
        network: None,
        ..common::options()
    })
    .await;
    let probe = format!(
        "grep CapEff /proc/self/status; \
         printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 {address} 8080 2>/dev/null | tail -n 1 \
           | grep -x hi || echo not-reached"
    );
    for trust in [Trust::Trusted, Trust::Untrusted] {
        let fx = Fixture::new("isolated");
        let mut spec = fx
            .spec(&backend, "isolated")
            .step(Step::new("probe", probe.clone()));
        spec.trust = trust;
        let (result, log) = run_to_end(&backend, &spec).await;
        let text = log.text();
        assert_eq!(result.status, RunStatus::Success, "{text}");
        match trust {
            Trust::Trusted => {
                // The probe can see a neighbour: a trusted run on the
                // default bridge reaches it, with Docker's capabilities.
                assert!(text.contains("\nhi\n"), "{text}");
                assert!(text.contains("CapEff:\t00000000a80425fb"), "{text}");
            }
            Trust::Untrusted => {
                assert!(text.contains("not-reached"), "{text}");
                assert!(text.contains("network knotless-"), "{text}");
                // CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL, SETGID,
                // SETUID and NET_BIND_SERVICE: no NET_RAW, MKNOD, ...
                assert!(text.contains("CapEff:\t00000000000004fb"), "{text}");
            }
        }
        assert_nothing_left(&backend, &fx.runner).await;
    }
}

/// A runner that dies with an untrusted run up leaves its container and
/// its network: another runner's stop (as the journal does) and cleanup
/// each remove both.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_runs_network_goes_with_a_stop_or_cleanup_by_another_runner() {
    let options = || DockerOptions {
        network: None,
        ..common::options()
    };
    for by_cleanup in [false, true] {
        let fx = Fixture::new("netleft");
        let crashed = docker(options()).await;
        let mut spec = fx.spec(&crashed, "netleft").step(Step::new("x", "true"));
        spec.trust = Trust::Untrusted;
        let handle = crashed
            .0
            .start(&spec, &RunLog::discard(), CancellationToken::new())
            .await
            .unwrap();
        drop(crashed);
        let next = docker(options()).await;
        let left = next.leftovers(&fx.runner).await;
        assert!(
            left.iter().any(|l| l.starts_with("network/knotless-")),
            "{left:?}"
        );
        if by_cleanup {
            let report = next.0.cleanup(&fx.runner, CleanupScope::All).await.unwrap();
            assert_eq!(report.removed.len(), 2, "{report:?}");
        } else {
            next.0.stop(&handle).await.unwrap();
        }
        assert_nothing_left(&next, &fx.runner).await;
    }
}

/// The channel's agent and a step's supervisor hold the keys of the end
/// marks (the supervisor its step's, the agent every message's): a
/// process of the step's own user, even root without `CAP_SYS_PTRACE`,
/// cannot read their descriptors or environment, as it can its own.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_cannot_read_its_supervisors_or_the_channels_descriptors() {
    let backend = docker(common::options()).await;
    let fx = Fixture::new("keys");
    let probe = r#"readlink /proc/$$/fd/0 > /dev/null && echo own-readable
for p in $PPID $(cut -d' ' -f4 /proc/$PPID/stat); do
  readlink /proc/$p/fd/0 > /dev/null 2>&1 && echo "fd of $p exposed"
  cat /proc/$p/environ > /dev/null 2>&1 && echo "environ of $p exposed"
done
echo probed"#;
    let spec = fx.spec(&backend, "keys").step(Step::new("probe", probe));
    let (result, log) = run_to_end(&backend, &spec).await;
    let text = log.text();
    assert_eq!(result.status, RunStatus::Success, "{text}");
    assert!(
        text.contains("own-readable\n") && text.contains("probed\n"),
        "{text}"
    );
    assert!(!text.contains("exposed"), "{text}");
    assert_nothing_left(&backend, &fx.runner).await;
}
