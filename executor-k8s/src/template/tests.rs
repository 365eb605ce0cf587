use serde_json::json;

use super::*;

fn refused(text: &str) -> TemplateError {
    PodTemplate::parse(text).expect_err("refused")
}

#[test]
fn each_form_gives_the_same_spec() {
    let spec = "runtimeClassName: gvisor\n";
    for text in [
        format!("kind: Pod\nmetadata:\n  name: x\nspec:\n  {spec}"),
        format!("kind: PodTemplate\ntemplate:\n  spec:\n    {spec}"),
        format!("spec:\n  {spec}"),
        spec.to_string(),
        "{\"spec\": {\"runtimeClassName\": \"gvisor\"}}".to_string(),
    ] {
        let template = PodTemplate::parse(&text).unwrap();
        assert_eq!(template.spec()["runtimeClassName"], "gvisor", "{text}");
    }
}

#[test]
fn what_the_runner_owns_is_refused_with_its_field_and_line() {
    let cases = [
        ("kind: Job\n", "kind", 1),
        ("spec:\n  restartPolicy: Always\n", "spec.restartPolicy", 2),
        ("automountServiceAccountToken: true\n", "automountServiceAccountToken", 1),
        ("volumes:\n  - name: work\n    emptyDir: {}\n", "volumes[0].name", 2),
        ("containers:\n  - name: run\n    command: [sh]\n", "containers[0].command", 3),
        ("containers:\n  - name: run\n    workingDir: /x\n", "containers[0].workingDir", 3),
        ("containers:\n  - name: run\n    ports: []\n", "containers[0].ports", 3),
        (
            "containers:\n  - name: run\n    env:\n      - name: WORK_DIR\n        value: /x\n",
            "containers[0].env[0].name",
            4,
        ),
        (
            "containers:\n  - name: run\n    volumeMounts:\n      - name: c\n        mountPath: /work/cache\n",
            "containers[0].volumeMounts[0].mountPath",
            5,
        ),
        (
            "containers:\n  - name: run\n    volumeMounts:\n      - name: c\n        mountPath: /\n",
            "containers[0].volumeMounts[0].mountPath",
            5,
        ),
        (
            "containers:\n  - name: run\n    securityContext:\n      capabilities:\n        add: [SYS_ADMIN]\n",
            "containers[0].securityContext.capabilities.add",
            5,
        ),
        (
            "containers:\n  - name: run\n    securityContext:\n      privileged: true\n",
            "containers[0].securityContext.privileged",
            4,
        ),
        (
            "metadata:\n  labels:\n    dev.knotless.runner: x\n",
            "metadata.labels.dev.knotless.runner",
            3,
        ),
        ("metadata:\n  finalizers: [x]\n", "metadata.finalizers", 2),
        ("initContainers:\n  - name: run\n    image: x\n", "initContainers[0].name", 2),
    ];
    for (text, field, line) in cases {
        let err = refused(text);
        assert_eq!(err.field, field, "{text}: {err}");
        assert_eq!(err.line, Some(line), "{text}: {err}");
        assert!(err.to_string().contains(&format!("(line {line})")), "{err}");
    }
}

#[test]
fn text_that_is_not_yaml_is_refused() {
    let err = refused("spec: [unclosed\n");
    assert!(err.problem.contains("not YAML"), "{err}");
    assert!(refused("- a\n- b\n").problem.contains("mapping"));
}

#[test]
fn untrusted_code_gets_nothing_looser() {
    let cases = [
        ("hostNetwork: true\n", "hostNetwork"),
        ("shareProcessNamespace: true\n", "shareProcessNamespace"),
        ("volumes:\n  - name: h\n    hostPath:\n      path: /\n", "volumes[0].hostPath"),
        (
            "containers:\n  - name: dind\n    image: docker\n    securityContext:\n      privileged: true\n",
            "containers[0].securityContext.privileged",
        ),
        (
            "initContainers:\n  - name: i\n    image: x\n    securityContext:\n      allowPrivilegeEscalation: true\n",
            "initContainers[0].securityContext.allowPrivilegeEscalation",
        ),
        (
            "securityContext:\n  seccompProfile:\n    type: Unconfined\n",
            "securityContext.seccompProfile.type",
        ),
        (
            "volumes:\n  - name: cache\n    persistentVolumeClaim:\n      claimName: c\ncontainers:\n  - name: run\n    volumeMounts:\n      - name: cache\n        mountPath: /cache\n",
            "containers[0].volumeMounts[0]",
        ),
    ];
    for (text, field) in cases {
        let template = PodTemplate::parse(text).unwrap();
        let err = template.check_untrusted().expect_err(text);
        assert_eq!(err.field, field, "{text}: {err}");
    }
    let read_only = PodTemplate::parse(
        "volumes:\n  - name: cache\n    persistentVolumeClaim:\n      claimName: c\n      readOnly: true\ncontainers:\n  - name: run\n    volumeMounts:\n      - name: cache\n        mountPath: /cache\n",
    )
    .unwrap();
    read_only.check_untrusted().unwrap();
}

#[test]
fn the_runner_lays_its_pod_over_the_template() {
    let template = PodTemplate::parse(
        r#"
metadata:
  annotations:
    cluster-autoscaler.kubernetes.io/safe-to-evict: "false"
  labels:
    team: ci
spec:
  runtimeClassName: gvisor
  priorityClassName: ci-high
  nodeSelector:
    pool: ci
  tolerations:
    - key: ci
      operator: Exists
  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - topologyKey: zone
  volumes:
    - name: cache
      persistentVolumeClaim:
        claimName: warm
  containers:
    - name: run
      env:
        - name: CARGO_HOME
          value: /cache/cargo
      volumeMounts:
        - name: cache
          mountPath: /cache
      resources:
        limits:
          memory: 1Gi
      securityContext:
        readOnlyRootFilesystem: true
    - name: proxy
      image: envoy
"#,
    )
    .unwrap();
    assert_eq!(template.claims(), ["warm"]);
    let mut pod = json!({
        "metadata": {"labels": {"dev.knotless.runner": "r"}},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"pool": "big", "zone": "a"},
            "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "kubernetes.io/hostname"}]}},
            "containers": [{
                "name": "run", "image": "busybox", "env": [{"name": "WORK_DIR", "value": "/work"}],
                "resources": {"limits": {"cpu": "1"}},
                "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
                "volumeMounts": [{"name": "work", "mountPath": "/work"}],
            }],
            "volumes": [{"name": "work", "emptyDir": {}}],
        },
    });
    template.lay_under(&mut pod).unwrap();
    let spec = &pod["spec"];
    assert_eq!(
        pod["metadata"]["labels"],
        json!({"team": "ci", "dev.knotless.runner": "r"})
    );
    assert_eq!(
        pod["metadata"]["annotations"]["cluster-autoscaler.kubernetes.io/safe-to-evict"],
        "false"
    );
    assert_eq!(spec["runtimeClassName"], "gvisor");
    assert_eq!(spec["restartPolicy"], "Never");
    assert_eq!(spec["nodeSelector"], json!({"pool": "big", "zone": "a"}));
    assert_eq!(
        spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"],
        json!([{"topologyKey": "zone"}, {"topologyKey": "kubernetes.io/hostname"}])
    );
    let volumes: Vec<_> = spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].clone())
        .collect();
    assert_eq!(volumes, [json!("cache"), json!("work")]);
    let step = &spec["containers"][0];
    assert_eq!(step["name"], "run");
    assert_eq!(step["image"], "busybox");
    assert_eq!(step["env"][0]["name"], "CARGO_HOME");
    assert_eq!(step["env"][1]["name"], "WORK_DIR");
    assert_eq!(step["volumeMounts"][0]["mountPath"], "/cache");
    assert_eq!(step["volumeMounts"][1]["mountPath"], "/work");
    assert_eq!(
        step["resources"]["limits"],
        json!({"memory": "1Gi", "cpu": "1"})
    );
    assert_eq!(step["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        step["securityContext"]["capabilities"],
        json!({"drop": ["ALL"]})
    );
    assert_eq!(spec["containers"][1]["name"], "proxy");
}

#[test]
fn a_template_container_named_as_a_service_is_refused() {
    let template = PodTemplate::parse("containers:\n  - name: db\n    image: x\n").unwrap();
    let mut pod =
        json!({"metadata": {}, "spec": {"containers": [{"name": "run"}, {"name": "db"}]}});
    let err = template.lay_under(&mut pod).unwrap_err();
    assert!(err.contains("db"), "{err}");
}
