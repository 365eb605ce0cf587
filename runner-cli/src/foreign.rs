//! Flags of another backend are refused, not ignored: `--executor k8s
//! --memory 64m` would otherwise run a pod with no limit at all.

use crate::args::{DockerArgs, ExecutorKind, K8sArgs, Pull, RunArgs};

/// The first flag `args` sets that its executor does not read, as an
/// input error naming this executor's flag for the same thing, if it has
/// one.
pub fn refuse(args: &RunArgs) -> Result<(), String> {
    let executor = args.executor;
    let name = executor.name();
    let mut given: Vec<(&str, &str, Option<&str>)> = Vec::new();
    if executor != ExecutorKind::Docker {
        given.extend(docker_flags(&args.docker).into_iter().map(|(flag, k8s)| {
            let instead = (executor == ExecutorKind::K8s).then_some(k8s).flatten();
            (flag, "docker", instead)
        }));
    }
    if executor != ExecutorKind::K8s {
        given.extend(k8s_flags(&args.k8s).into_iter().map(|(flag, docker)| {
            let instead = (executor == ExecutorKind::Docker)
                .then_some(docker)
                .flatten();
            (flag, "k8s", instead)
        }));
    }
    if executor == ExecutorKind::Shell {
        if args.image.is_some() {
            given.push(("--image", "docker and k8s", None));
        }
        if !args.cap_add.is_empty() {
            given.push(("--cap-add", "docker and k8s", None));
        }
    }
    match given.first() {
        None => Ok(()),
        Some((flag, owner, Some(instead))) => Err(format!(
            "{flag} is a flag of the {owner} executor, which this run does not use; on the {name} executor use {instead}"
        )),
        Some((flag, owner, None)) => Err(format!(
            "{flag} is a flag of the {owner} executor, which this run does not use, and the {name} executor has no such setting: leave it out"
        )),
    }
}

/// The docker flags `docker` sets, each with the k8s flag for the same
/// thing.
fn docker_flags(docker: &DockerArgs) -> Vec<(&'static str, Option<&'static str>)> {
    let mut given = Vec::new();
    if docker.memory.is_some() {
        given.push(("--memory", Some("--memory-limit")));
    }
    if docker.cpus.is_some() {
        given.push(("--cpus", Some("--cpu-limit")));
    }
    if docker.network.is_some() {
        given.push(("--network", None));
    }
    if docker.user.is_some() {
        given.push(("--user", Some("--run-as-user and --run-as-group")));
    }
    if docker.pull != Pull::Missing {
        given.push(("--pull", None));
    }
    if docker.pids_limit != executor_docker::DEFAULT_PIDS_LIMIT {
        given.push(("--pids-limit", None));
    }
    if !docker.cap_drop.is_empty() {
        given.push(("--cap-drop", None));
    }
    let operator = [
        ("--volume", !docker.volumes.is_empty(), None),
        ("--privileged", docker.privileged, None),
        ("--runtime", docker.runtime.is_some(), None),
        ("--shm-size", docker.shm_size.is_some(), None),
        ("--add-host", !docker.add_hosts.is_empty(), None),
        ("--dns", !docker.dns.is_empty(), None),
        ("--device", !docker.devices.is_empty(), None),
    ];
    for (flag, set, k8s) in operator {
        if set {
            given.push((flag, k8s));
        }
    }
    if docker.read_only {
        given.push(("--read-only", None));
    }
    given
}

/// The k8s flags `k8s` sets, each with the docker flag for the same
/// thing. `--reconnect-timeout` and `--compression` are both backends'.
fn k8s_flags(k8s: &K8sArgs) -> Vec<(&'static str, Option<&'static str>)> {
    let mut given = Vec::new();
    let mut set = |on: bool, flag: &'static str, docker: Option<&'static str>| {
        if on {
            given.push((flag, docker));
        }
    };
    set(k8s.kubeconfig.is_some(), "--kubeconfig", None);
    set(k8s.context.is_some(), "--context", None);
    set(k8s.namespace.is_some(), "--namespace", None);
    set(
        k8s.insecure_skip_tls_verify,
        "--insecure-skip-tls-verify",
        None,
    );
    set(k8s.insecure_plain_http, "--insecure-plain-http", None);
    set(k8s.cpu_request.is_some(), "--cpu-request", None);
    set(k8s.cpu_limit.is_some(), "--cpu-limit", Some("--cpus"));
    set(k8s.memory_request.is_some(), "--memory-request", None);
    set(
        k8s.memory_limit.is_some(),
        "--memory-limit",
        Some("--memory"),
    );
    set(!k8s.node_selector.is_empty(), "--node-selector", None);
    set(!k8s.tolerations.is_empty(), "--toleration", None);
    set(k8s.service_account.is_some(), "--service-account", None);
    set(k8s.image_pull_secret.is_some(), "--image-pull-secret", None);
    set(k8s.run_as_user.is_some(), "--run-as-user", Some("--user"));
    set(k8s.run_as_group.is_some(), "--run-as-group", Some("--user"));
    set(k8s.run_as_non_root, "--run-as-non-root", None);
    set(k8s.isolate.is_some(), "--isolate", None);
    set(k8s.pod_template.is_some(), "--pod-template", None);
    set(
        k8s.step_isolation != executor_k8s::StepIsolation::Auto,
        "--step-isolation",
        None,
    );
    // `--pod-timeout`'s default, 10m.
    set(
        k8s.pod_timeout != std::time::Duration::from_secs(600),
        "--pod-timeout",
        None,
    );
    given
}
