//! Shell-specific behaviour: process groups, crashed-run cleanup, dry-run.

use std::time::Duration;

use executor_conformance::fixture::SharedBuf;
use executor_core::{run, CleanupScope, Executor, RunLog, RunSpec, RunStatus, Step};
use executor_shell::{Plan, ShellExecutor};
use tokio_util::sync::CancellationToken;

fn alive(pid: i32) -> bool {
    // A zombie is dead for our purposes: it runs nothing.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

#[tokio::test]
async fn background_process_does_not_hold_the_step_and_stop_kills_it() {
    let (base, checkout, outputs) = (tempdir(), tempdir(), tempdir());
    let executor = ShellExecutor::new(base.path());
    let spec = RunSpec::new("bg", "did:plc:bg", checkout.path(), outputs.path())
        .step(Step::new(
            "spawn",
            "sleep 600 & echo $! > \"$OUTPUTS_DIR/pid\"",
        ))
        .step(Step::new("next", "echo next-ran"))
        .timeouts(Duration::from_secs(120), Duration::from_secs(60));
    let (log, text) = RunLog::memory();
    let result = run(&executor, &spec, &log, CancellationToken::new()).await;
    assert_eq!(result.status, RunStatus::Success, "{}", text.text());
    assert!(text.text().contains("next-ran"));
    let pid: i32 = std::fs::read_to_string(outputs.path().join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    gone(pid, "the background sleep that outlived stop").await;
    assert!(executor.leftovers("did:plc:bg").is_empty());
}

/// Waits for `pid` to end: SIGKILL is delivered asynchronously, so the
/// process may still be on its way out. Its pidfd turns readable when it
/// exits (a zombie has exited); the deadline only guards against a hang.
async fn gone(pid: i32, what: &str) {
    use std::os::fd::{FromRawFd, OwnedFd};
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        let err = std::io::Error::last_os_error();
        assert_eq!(
            err.raw_os_error(),
            Some(libc::ESRCH),
            "pidfd_open({pid}): {err}"
        );
        return; // already reaped
    }
    // SAFETY: a new fd that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(i32::try_from(fd).unwrap()) };
    let exited = tokio::task::spawn_blocking(move || {
        use std::os::fd::AsRawFd;
        let mut poll = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, for at most 60 s.
        unsafe { libc::poll(&mut poll, 1, 60_000) }
    })
    .await
    .unwrap();
    assert_eq!(exited, 1, "{what} {pid} is still alive");
    assert!(!alive(pid), "{what} {pid} is still alive");
}

#[tokio::test]
async fn a_process_that_leaves_its_session_is_still_ended_at_stop() {
    let (base, checkout, outputs) = (tempdir(), tempdir(), tempdir());
    let executor = ShellExecutor::new(base.path());
    // The escapee tells its pid through a fifo once it runs in its own
    // session, out of reach of the step's process group.
    let spec = RunSpec::new("escape", "did:plc:escape", checkout.path(), outputs.path())
        .step(Step::new(
            "escape",
            "mkfifo ready; setsid sh -c 'echo $$ > ready; exec sleep 600' & read pid < ready; \
             test \"$(cut -d' ' -f6 /proc/$pid/stat)\" = \"$pid\"; echo $pid > \"$OUTPUTS_DIR/pid\"",
        ))
        .timeouts(Duration::from_secs(120), Duration::from_secs(60));
    let (log, text) = RunLog::memory();
    let result = run(&executor, &spec, &log, CancellationToken::new()).await;
    assert_eq!(result.status, RunStatus::Success, "{}", text.text());
    let pid: i32 = std::fs::read_to_string(outputs.path().join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    gone(pid, "the step's setsid sleep").await;
}

#[tokio::test]
async fn cleanup_ends_the_processes_of_a_crashed_run() {
    let base = tempdir();
    let executor = ShellExecutor::new(base.path());
    let crashed = base
        .path()
        .join("did-plc-crash2-".to_string() + &hash_of("did:plc:crash2"))
        .join("crashed-abc");
    std::fs::create_dir_all(&crashed).unwrap();
    std::fs::write(crashed.join(".lock"), "").unwrap();
    let mark = "0123456789abcdef0123456789abcdef";
    std::fs::write(crashed.join("mark"), mark).unwrap();
    // What a step of the dead run left: its own session, the run's mark.
    let mut escapee = std::process::Command::new("setsid")
        .args(["sleep", "600"])
        .env("KNOTLESS_RUN_MARK", mark)
        .spawn()
        .unwrap();
    // Anything else, even with a mark of another run, is left alone.
    let mut bystander = std::process::Command::new("sleep")
        .arg("600")
        .env("KNOTLESS_RUN_MARK", "ffffffffffffffffffffffffffffffff")
        .spawn()
        .unwrap();
    let report = executor
        .cleanup("did:plc:crash2", CleanupScope::Expired)
        .await
        .unwrap();
    assert_eq!(report.removed.len(), 1, "{report:?}");
    // Killed by then; a deadline keeps a miss from hanging the suite.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = escapee.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = escapee.kill();
            panic!("cleanup left the escapee running");
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "{status:?}"
    );
    assert!(alive(i32::try_from(bystander.id()).unwrap()));
    bystander.kill().unwrap();
    bystander.wait().unwrap();
}

/// A process of the crashed run caught between two programs shows no
/// environment for a while (an `execve` on a loaded machine takes time);
/// cleanup looks again until it shows its mark, and ends it. Modelled by
/// a process with no environment at all that, a tenth of a second on,
/// becomes a marked one: a handful of immediate looks missed it (as a
/// loaded suite once missed a `setsid sleep`).
#[tokio::test]
async fn cleanup_waits_out_a_process_between_two_programs() {
    let base = tempdir();
    let executor = ShellExecutor::new(base.path());
    let crashed = base
        .path()
        .join("did-plc-crash3-".to_string() + &hash_of("did:plc:crash3"))
        .join("crashed-def");
    std::fs::create_dir_all(&crashed).unwrap();
    std::fs::write(crashed.join(".lock"), "").unwrap();
    let mark = "00112233445566778899aabbccddeeff";
    std::fs::write(crashed.join("mark"), mark).unwrap();
    let mut changing = std::process::Command::new("env")
        .args(["-i", "/bin/sh", "-c"])
        .arg(format!(
            "sleep 0.1; exec /usr/bin/env KNOTLESS_RUN_MARK={mark} sleep 600"
        ))
        .spawn()
        .unwrap();
    // It shows no environment before cleanup looks.
    let pid = changing.id();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::fs::read(format!("/proc/{pid}/environ")).map_or(true, |e| !e.is_empty()) {
        assert!(
            std::time::Instant::now() < deadline,
            "env -i never took effect"
        );
        tokio::task::yield_now().await;
    }
    executor
        .cleanup("did:plc:crash3", CleanupScope::Expired)
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = changing.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = changing.kill();
            panic!("cleanup left the process that became the run's");
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "{status:?}"
    );
}

/// Runs one step on `base` and returns the run's error.
async fn error_on_base(base: &std::path::Path) -> String {
    let (checkout, outputs) = (tempdir(), tempdir());
    let executor = ShellExecutor::new(base);
    let spec = RunSpec::new(
        "private",
        "did:plc:private",
        checkout.path(),
        outputs.path(),
    )
    .step(Step::new("never", "echo the-step-ran"));
    let (log, text) = RunLog::memory();
    let result = run(&executor, &spec, &log, CancellationToken::new()).await;
    assert_eq!(result.status, RunStatus::Error, "{}", text.text());
    assert!(!text.text().contains("the-step-ran"));
    assert!(executor.leftovers("did:plc:private").is_empty());
    result.error.unwrap_or_default()
}

#[tokio::test]
async fn a_base_other_users_could_change_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempdir();
    // A shared folder without the sticky bit: anyone may swap its entries.
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let error = error_on_base(&shared.join("base")).await;
    assert!(
        error.contains("not private") && error.contains("can be written by other users"),
        "{error}"
    );
}

/// A base folder, or a symlink where it would be, that another user owns
/// is refused naming that user. As root, the test hands its own to
/// `nobody`; as any other user, root's own `/` plays the other user's
/// folder (a planted symlink needs root to plant).
#[tokio::test]
async fn a_base_another_user_owns_is_refused() {
    let dir = tempdir();
    if !nix::unistd::Uid::effective().is_root() {
        let error = error_on_base(std::path::Path::new("/")).await;
        assert!(error.contains("belongs to user 0"), "{error}");
        // A symlink of another user's takes one who can hand files to
        // others (root and this user are trusted with links): that part
        // runs as root only.
        return;
    }
    let nobody = 65534;
    // A base folder another user made first.
    let theirs = dir.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(nobody), Some(nobody)).unwrap();
    let error = error_on_base(&theirs).await;
    assert!(error.contains("belongs to user 65534"), "{error}");
    // A symlink another user planted where the base would be.
    let elsewhere = tempdir();
    let planted = dir.path().join("planted");
    std::os::unix::fs::symlink(elsewhere.path(), &planted).unwrap();
    std::os::unix::fs::lchown(&planted, Some(nobody), Some(nobody)).unwrap();
    let error = error_on_base(&planted).await;
    assert!(error.contains("is a symlink of user 65534"), "{error}");
}

#[tokio::test]
async fn run_folders_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let (dir, checkout, outputs) = (tempdir(), tempdir(), tempdir());
    let base = dir.path().join("new/base");
    let executor = ShellExecutor::new(&base);
    let spec = RunSpec::new("mode", "did:plc:mode", checkout.path(), outputs.path()).step(
        Step::new("mode", "stat -c %a \"$WORK_DIR/..\" \"$WORK_DIR/../..\""),
    );
    let (log, text) = RunLog::memory();
    let result = run(&executor, &spec, &log, CancellationToken::new()).await;
    assert_eq!(result.status, RunStatus::Success, "{}", text.text());
    assert!(text.text().contains("700\n700\n"), "{}", text.text());
    for made in [dir.path().join("new"), base.clone()] {
        let mode = std::fs::metadata(&made).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{}", made.display());
    }
}

#[tokio::test]
async fn cleanup_removes_crashed_runs_only() {
    let base = tempdir();
    let executor = ShellExecutor::new(base.path());
    let runner_dir = base
        .path()
        .join("did-plc-crash-".to_string() + &hash_of("did:plc:crash"));
    // A run root whose owner died: it has a lock file nobody holds.
    let crashed = runner_dir.join("crashed-abc");
    std::fs::create_dir_all(crashed.join("work/ro")).unwrap();
    std::fs::write(crashed.join(".lock"), "").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        crashed.join("work/ro"),
        std::fs::Permissions::from_mode(0o500),
    )
    .unwrap();
    // Another runner's crashed root must survive.
    let other = base.path().join("did-plc-other-x/crashed");
    std::fs::create_dir_all(&other).unwrap();

    assert_eq!(executor.leftovers("did:plc:crash").len(), 1);
    let report = executor
        .cleanup("did:plc:crash", CleanupScope::Expired)
        .await
        .unwrap();
    assert_eq!(report.removed.len(), 1, "{report:?}");
    assert!(!crashed.exists());
    assert!(other.exists());
}

#[tokio::test]
async fn dry_run_prints_every_call_and_touches_nothing() {
    let (checkout, outputs) = (tempdir(), tempdir());
    let base = checkout.path().join("never-created");
    let plan = SharedBuf::default();
    let executor = ShellExecutor::dry_run(&base, Plan::new(plan.clone()));
    let spec = RunSpec::new("dry", "did:plc:dry", checkout.path(), outputs.path())
        .env("TOKEN", "s3cret-value")
        .step(Step::new("build", "make all"));
    let result = run(
        &executor,
        &spec,
        &RunLog::discard(),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(result.status, RunStatus::Success);
    let text = plan.text();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("environment: run folder "), "{text}");
    assert!(lines[2].starts_with("tar "), "{text}");
    assert!(lines[3].starts_with("write 1 step scripts into "), "{text}");
    assert!(lines[4].contains("sh -ec \"make all\""), "{text}");
    assert!(lines[4].contains("TOKEN"), "{text}");
    assert!(
        !text.contains("s3cret-value"),
        "a variable's value leaked: {text}"
    );
    assert!(
        lines[6].starts_with("kill the run's process groups"),
        "{text}"
    );
    assert!(!base.exists(), "the dry-run created {}", base.display());
    assert_eq!(std::fs::read_dir(outputs.path()).unwrap().count(), 0);
}

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

fn hash_of(raw: &str) -> String {
    executor_core::labels::label_value(raw)
        .rsplit('-')
        .next()
        .unwrap()
        .to_string()
}

/// An embedder that hands the shell a cache path on the host gets an
/// input failure and nothing runs: the check is the executor's, not only
/// runner-cli's.
#[tokio::test]
async fn host_cache_paths_are_refused_before_anything_runs() {
    let (base, checkout, outputs) = (tempdir(), tempdir(), tempdir());
    let executor = ShellExecutor::new(base.path());
    let marker = outputs.path().join("ran");
    let step = Step::new("touch", format!("touch {}", marker.display()));
    let mut spec = RunSpec::new("c", "did:plc:c", checkout.path(), outputs.path()).step(step);
    spec.caches = vec![executor_core::CacheSpec::parse("home=/root").unwrap()];
    let result = run(
        &executor,
        &spec,
        &RunLog::discard(),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(result.status, RunStatus::Error, "{}", result.to_json());
    let failure = result.failure.expect("a failure");
    assert_eq!(failure.kind, executor_core::FailureKind::Input);
    assert!(
        failure.message.contains("RunSpec::caches"),
        "{}",
        failure.message
    );
    assert!(!marker.exists(), "a step ran");
    assert_eq!(
        std::fs::read_dir(base.path())
            .map(|d| d.count())
            .unwrap_or(0),
        0
    );
}
