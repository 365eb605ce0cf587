//! runner-cli pulls a private image with the credentials the docker CLI
//! would use: from a real registry (Debian's `docker-registry`) that
//! refuses anonymous pulls, logged in to with the real `docker login`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const USER: &str = "knotless";
const PASSWORD: &str = "pw-7c1e9a-never-shown";

fn image() -> String {
    std::env::var("KNOTLESS_TEST_IMAGE").unwrap_or_else(|_| "knotless-busybox:local".into())
}

/// A registry on a port of its own that takes only `USER`'s login; killed
/// and its storage removed when dropped.
struct Registry {
    child: Child,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// The status line of `GET /v2/`, if the registry answers.
fn v2_status(addr: &str) -> Option<String> {
    let mut conn = TcpStream::connect(addr).ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    conn.write_all(format!("GET /v2/ HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .ok()?;
    let mut answer = String::new();
    conn.read_to_string(&mut answer).ok()?;
    answer.lines().next().map(str::to_string)
}

fn start_registry() -> Registry {
    let dir = tempfile::tempdir().unwrap();
    let htpasswd = Command::new("htpasswd")
        .args(["-Bbn", USER, PASSWORD])
        .output()
        .expect("htpasswd (Debian's apache2-utils; scripts/prepare-engine.sh installs it)");
    assert!(htpasswd.status.success());
    std::fs::write(dir.path().join("htpasswd"), &htpasswd.stdout).unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let config = format!(
        "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {root}\nhttp:\n  addr: {addr}\nauth:\n  htpasswd:\n    realm: knotless\n    path: {htpasswd}\n",
        root = dir.path().join("data").display(),
        htpasswd = dir.path().join("htpasswd").display(),
    );
    std::fs::write(dir.path().join("config.yml"), config).unwrap();
    let child = Command::new("docker-registry")
        .arg("serve")
        .arg(dir.path().join("config.yml"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect(
            "docker-registry (Debian's docker-registry; scripts/prepare-engine.sh installs it)",
        );
    let registry = Registry {
        child,
        addr,
        _dir: dir,
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match v2_status(&registry.addr) {
            Some(status) => {
                assert!(
                    status.contains("401"),
                    "the registry must want a login: {status}"
                );
                break;
            }
            None if Instant::now() < deadline => {
                // Nothing tells when a process starts listening.
                std::thread::sleep(Duration::from_millis(50));
            }
            None => panic!(
                "docker-registry did not answer on {} in 30 s",
                registry.addr
            ),
        }
    }
    registry
}

fn docker(config: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new("docker")
        .env("DOCKER_CONFIG", config)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).unwrap();
    }
    drop(input);
    child.wait_with_output().unwrap()
}

fn ok(out: Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs one step on `image` with `--pull always` and `DOCKER_CONFIG` at
/// `config`, `path_first` ahead on `PATH`.
fn run(image: &str, config: &Path, path_first: Option<&Path>, dir: &Path) -> (Output, String) {
    std::fs::create_dir_all(dir.join("checkout")).unwrap();
    std::fs::write(dir.join("steps.tsv"), "hello\techo pulled-and-ran\n").unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_runner-cli"));
    cmd.env("DOCKER_CONFIG", config).args([
        "run",
        "--executor",
        "docker",
        "--image",
        image,
        "--pull",
        "always",
        "--network",
        "none",
        "--name",
        "private-pull",
        "--runner",
        "did:plc:registry-test",
    ]);
    cmd.arg("--workdir")
        .arg(dir.join("checkout"))
        .arg("--steps-file")
        .arg(dir.join("steps.tsv"))
        .arg("--log")
        .arg(dir.join("run.log"))
        .arg("--result")
        .arg(dir.join("result.json"));
    if let Some(first) = path_first {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let mut paths: Vec<PathBuf> = vec![first.to_path_buf()];
        paths.extend(std::env::split_paths(&path));
        cmd.env("PATH", std::env::join_paths(paths).unwrap());
    }
    let out = cmd.output().unwrap();
    let log = std::fs::read_to_string(dir.join("run.log")).unwrap_or_default();
    let result = std::fs::read_to_string(dir.join("result.json")).unwrap_or_default();
    for text in [
        &log,
        &result,
        &String::from_utf8_lossy(&out.stdout).into_owned(),
        &String::from_utf8_lossy(&out.stderr).into_owned(),
    ] {
        assert!(!text.contains(PASSWORD), "the password was shown: {text}");
    }
    (out, log)
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[test]
fn a_private_image_is_pulled_with_the_docker_clis_credentials() {
    let registry = start_registry();
    let work = tempfile::tempdir().unwrap();
    let logged_in = work.path().join("logged-in");
    let anonymous = work.path().join("anonymous");
    std::fs::create_dir_all(&logged_in).unwrap();
    std::fs::create_dir_all(&anonymous).unwrap();
    ok(
        docker(
            &logged_in,
            &["login", &registry.addr, "-u", USER, "--password-stdin"],
            Some(PASSWORD),
        ),
        "docker login",
    );
    let private = format!("{}/knotless/private:t{}", registry.addr, std::process::id());
    ok(
        docker(&logged_in, &["tag", &image(), &private], None),
        "docker tag",
    );
    ok(docker(&logged_in, &["push", &private], None), "docker push");
    // Pulled again below, from the registry; the base image stays.
    let untag = || {
        let _ = docker(&logged_in, &["rmi", &private], None);
    };
    untag();

    // No credentials: refused, and the message says how to log in.
    let (out, log) = run(&private, &anonymous, None, &work.path().join("a"));
    assert_eq!(out.status.code(), Some(3), "{log}");
    let login = format!("docker login {}", registry.addr);
    assert!(
        log.contains("no credentials were sent") && log.contains(&login),
        "{log}"
    );
    let result = std::fs::read_to_string(work.path().join("a/result.json")).unwrap();
    assert!(result.contains("\"image\""), "{result}");
    untag();

    // What `docker login` wrote: pulled and run.
    let (out, log) = run(&private, &logged_in, None, &work.path().join("b"));
    assert_eq!(out.status.code(), Some(0), "{log}");
    assert!(log.contains("pulled-and-ran"), "{log}");
    untag();

    // A credential store (`credsStore`), run as `docker-credential-NAME get`.
    let store = work.path().join("store");
    let bin = work.path().join("bin");
    std::fs::create_dir_all(&store).unwrap();
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(
        store.join("config.json"),
        r#"{"auths": {}, "credsStore": "knotless-test"}"#,
    )
    .unwrap();
    let helper = bin.join("docker-credential-knotless-test");
    std::fs::write(
        &helper,
        format!(
            "#!/bin/sh\n[ \"$1\" = get ] || exit 1\nread -r server\n[ \"$server\" = {} ] || {{ echo 'credentials not found in native keychain'; exit 1; }}\nprintf '{{\"ServerURL\":\"%s\",\"Username\":\"{USER}\",\"Secret\":\"{PASSWORD}\"}}' \"$server\"\n",
            registry.addr
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (out, log) = run(&private, &store, Some(&bin), &work.path().join("c"));
    assert_eq!(out.status.code(), Some(0), "{log}");
    assert!(log.contains("pulled-and-ran"), "{log}");
    untag();

    // Credentials the registry refuses: said so, not taken for no login.
    let wrong = work.path().join("wrong");
    std::fs::create_dir_all(&wrong).unwrap();
    std::fs::write(
        wrong.join("config.json"),
        format!(
            r#"{{"auths": {{"{}": {{"auth": "a25vdGxlc3M6bm90LWl0"}}}}}}"#,
            registry.addr
        ),
    )
    .unwrap();
    let (out, log) = run(&private, &wrong, None, &work.path().join("d"));
    assert_eq!(out.status.code(), Some(3), "{log}");
    assert!(
        log.contains("were refused") && log.contains(&login),
        "{log}"
    );
    untag();
}
