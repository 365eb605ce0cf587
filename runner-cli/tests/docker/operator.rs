//! The operator's settings of a run's container, through the binary on
//! the real engine: volumes (a host path and a named volume, which no
//! stop or cleanup removes), the runtime, `/dev/shm`, hosts, DNS and
//! privileged mode; and what an untrusted run is refused.

use super::*;

/// `run` of one step `script` on the test image, with `extra` flags, in
/// `dir`: the process's output.
fn run_with(dir: &Path, name: &str, script: &str, extra: &[&str]) -> std::process::Output {
    let steps = dir.join(format!("{name}.tsv"));
    std::fs::write(&steps, format!("step\t{script}\n")).unwrap();
    std::fs::create_dir_all(dir.join("checkout")).unwrap();
    cli()
        .args([
            "run",
            "--executor",
            "docker",
            "--image",
            &image(),
            "--pull",
            "never",
        ])
        .args(["--name", name, "--runner", "did:plc:operator", "--log", "-"])
        .arg("--workdir")
        .arg(dir.join("checkout"))
        .arg("--steps-file")
        .arg(&steps)
        .arg("--outputs")
        .arg(dir.join(format!("out-{name}")))
        .arg("--result")
        .arg(dir.join(format!("{name}.json")))
        .args(extra)
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

fn docker(args: &[&str]) -> std::process::Output {
    Command::new("docker").args(args).output().unwrap()
}

/// A volume of the test's own, removed when dropped.
struct Volume(String);

impl Drop for Volume {
    fn drop(&mut self) {
        let _ = docker(&["volume", "rm", "-f", &self.0]);
    }
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[test]
fn the_operators_settings_reach_the_container_and_its_volumes_outlive_it() {
    let dir = tempfile::tempdir().unwrap();
    let host = dir.path().join("host");
    std::fs::create_dir(&host).unwrap();
    std::fs::write(host.join("ca.pem"), "from the host\n").unwrap();
    let volume = Volume(format!("knotless-operator-{}", std::process::id()));
    assert!(docker(&["volume", "create", &volume.0]).status.success());
    let mounts = [
        format!("{}:/etc/ssl/extra:ro", host.display()),
        format!("{}:/cache", volume.0),
    ];
    let out = run_with(
        dir.path(),
        "settings",
        "cat /etc/ssl/extra/ca.pem; df -k /dev/shm | tail -1; grep knotless-host /etc/hosts; \
         grep -c 10.9.9.9 /etc/resolv.conf; echo warm > /cache/kept; \
         if touch /etc/ssl/extra/x 2>/dev/null; then echo host-writable; fi",
        &[
            "--volume",
            &mounts[0],
            "--volume",
            &mounts[1],
            "--runtime",
            "runc",
            "--shm-size",
            "8m",
            "--add-host",
            "knotless-host:10.1.2.3",
            "--dns",
            "10.9.9.9",
        ],
    );
    let log = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{log}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(log.contains("from the host\n"), "{log}");
    assert!(log.contains(" 8192 "), "/dev/shm is not 8 MiB: {log}");
    assert!(
        log.contains("10.1.2.3") && log.contains("knotless-host"),
        "{log}"
    );
    assert!(log.contains("\n1\n"), "no nameserver 10.9.9.9: {log}");
    assert!(!log.contains("host-writable"), "{log}");
    // Neither the run's stop nor a cleanup removes what it did not make.
    let cleanup = cli()
        .args([
            "cleanup",
            "--executor",
            "docker",
            "--runner",
            "did:plc:operator",
        ])
        .output()
        .unwrap();
    assert!(
        cleanup.status.success(),
        "{}",
        String::from_utf8_lossy(&cleanup.stderr)
    );
    assert!(
        docker(&["volume", "inspect", &volume.0]).status.success(),
        "the volume was removed"
    );
    let ro = format!("{}:/cache:ro", volume.0);
    let again = run_with(dir.path(), "again", "cat /cache/kept", &["--volume", &ro]);
    let log = String::from_utf8_lossy(&again.stdout);
    assert_eq!(again.status.code(), Some(0), "{log}");
    assert!(log.contains("warm\n"), "{log}");
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[test]
fn privileged_mode_and_a_runtime_the_engine_lacks() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_with(
        dir.path(),
        "privileged",
        "grep CapEff /proc/self/status",
        &["--privileged"],
    );
    let log = String::from_utf8_lossy(&out.stdout);
    // An engine that itself runs without every capability (one in a
    // sandbox, as on these machines) cannot start a privileged container
    // at all: then the run fails with the engine's own words, as the
    // docker CLI does, which shows the setting reached it.
    let engine = docker(&["run", "--rm", "--privileged", &image(), "true"]);
    if engine.status.success() {
        assert_eq!(out.status.code(), Some(0), "{log}");
        assert!(
            log.contains("CapEff:\t000001ff"),
            "not every capability: {log}"
        );
    } else {
        let said = String::from_utf8_lossy(&engine.stderr);
        assert!(said.contains("unable to apply caps"), "{said}");
        assert_eq!(out.status.code(), Some(3), "{log}");
        assert!(log.contains("unable to apply caps"), "{log}");
    }
    let out = run_with(
        dir.path(),
        "runtime",
        "true",
        &["--runtime", "knotless-no-such-runtime"],
    );
    assert_ne!(out.status.code(), Some(0));
    let r = result(&dir.path().join("runtime.json"));
    assert!(
        r.error
            .unwrap_or_default()
            .contains("knotless-no-such-runtime"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[test]
fn an_untrusted_run_gets_no_privilege_device_or_writable_mount() {
    let dir = tempfile::tempdir().unwrap();
    let host = dir.path().display().to_string();
    let writable = format!("{host}:/data");
    let read_only = format!("{host}:/data:ro");
    for (extra, says) in [
        (vec!["--privileged"], "--privileged"),
        (vec!["--device", "/dev/fuse"], "--device /dev/fuse"),
        (vec!["--volume", writable.as_str()], "add `:ro`"),
    ] {
        let mut flags = vec!["--trigger", "pull"];
        flags.extend(extra);
        let out = run_with(dir.path(), "untrusted", "true", &flags);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {err}");
        assert!(err.contains(says), "{flags:?}: {err}");
    }
    let out = run_with(
        dir.path(),
        "untrusted-ro",
        "ls /data >/dev/null",
        &["--trigger", "pull", "--volume", &read_only],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // A mount over the run's own folders is refused whoever runs.
    let over = format!("{host}:/work");
    let out = run_with(dir.path(), "over", "true", &["--volume", &over]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("the run's own folder /work"));
}

#[test]
fn the_dry_run_shows_the_operators_settings() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_with(
        dir.path(),
        "dry",
        "true",
        &[
            "--dry-run",
            "--privileged",
            "--runtime",
            "runsc",
            "--volume",
            "cache:/cache:ro",
            "--shm-size",
            "1g",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for said in [
        "\"Privileged\": true",
        "\"Runtime\": \"runsc\"",
        "\"Source\": \"cache\"",
        "\"ShmSize\": 1073741824",
    ] {
        assert!(text.contains(said), "{said}: {text}");
    }
}
