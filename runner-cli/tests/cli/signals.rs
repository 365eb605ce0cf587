//! Signals, closed pipes and a stalled reader

use super::*;

/// Starts a run whose first step waits for a signal; returns once the step
/// is running, with the run's stdout. The caller signals and waits for it.
#[allow(clippy::zombie_processes)]
fn running_step(
    case: &Case,
) -> (
    std::process::Child,
    std::io::BufReader<std::process::ChildStdout>,
) {
    let mut child = case
        .run(
            "wait\techo waiting-for-signal; exec sleep 600\nafter\ttrue\n",
            &["--log", "-"],
        )
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        let n = std::io::BufRead::read_line(&mut stdout, &mut line).unwrap_or(0);
        if n == 0 {
            let status = child.wait();
            panic!("runner-cli ended before the step ran: {status:?}");
        }
        if line.contains("waiting-for-signal") {
            return (child, stdout);
        }
    }
}

#[test]
fn sighup_and_sigint_cancel_like_sigterm_and_leave_nothing() {
    for signal in [
        nix::sys::signal::Signal::SIGHUP,
        nix::sys::signal::Signal::SIGINT,
    ] {
        let case = Case::new();
        let (mut child, _stdout) = running_step(&case);
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        nix::sys::signal::kill(pid, signal).unwrap();
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(130), "{signal}");
        let result = case.result();
        assert_eq!(
            result.status,
            executor_core::RunStatus::Cancelled,
            "{signal}"
        );
        // The run folder and the step's `sleep` are gone.
        let left: Vec<_> = walkdir::WalkDir::new(case.path("roots"))
            .min_depth(2)
            .into_iter()
            .filter_map(Result::ok)
            .collect();
        assert!(left.is_empty(), "{signal}: {left:?}");
    }
}

#[test]
fn a_signal_while_connecting_is_a_cancelled_result() {
    // An engine that accepts and never answers: the runner is still
    // connecting when the signal comes.
    let case = Case::new();
    let socket = case.path("silent.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let mut child = case
        .run(
            "a\ttrue\n",
            &["--executor", "docker", "--image", "busybox:local"],
        )
        .env("DOCKER_HOST", format!("unix://{}", socket.display()))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The runner is connecting once it has opened the socket: accept it.
    let (_conn, _) = _listener.accept().unwrap();
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    let result = case.result();
    assert_eq!(result.status, executor_core::RunStatus::Cancelled);
    assert!(result.error.unwrap_or_default().contains("connecting"));
}

#[test]
fn a_closed_stdout_and_stderr_do_not_stop_the_run() {
    // `runner-cli run --log - | head -1` with stderr closed too: the run
    // goes on, writes its result, and leaves nothing.
    let case = Case::new();
    let mut child = case
        .run(
            "talk\tfor i in $(seq 1 2000); do echo line $i; echo err $i >&2; done\n",
            &["--log", "-"],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    drop(child.stderr.take());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    assert_eq!(case.result().status, executor_core::RunStatus::Success);
}

#[test]
fn sigterm_cancels_and_exits_130() {
    let case = Case::new();
    let (mut child, _stdout) = running_step(&case);
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    let result = case.result();
    assert_eq!(result.status, executor_core::RunStatus::Cancelled);
    assert_eq!(result.steps[1].status, executor_core::StepStatus::Skipped);
}

/// The runner with `--log -` into a reader that stopped reading: the
/// run's timeout and a signal still end it, with a result. A runner that
/// wrote its log on the runtime's thread would hang here until the
/// watchdog below.
#[tokio::test]
async fn a_stalled_log_reader_holds_back_output_but_not_timeouts_or_signals() {
    const FLOOD: &str = "flood\tyes 0123456789 | head -c 20000000; exec sleep 600\n";
    const WATCHDOG: std::time::Duration = std::time::Duration::from_secs(90);

    let case = Case::new();
    let mut cmd = case.run(FLOOD, &["--log", "-", "--timeout", "3s"]);
    cmd.stdout(Stdio::piped());
    let mut child = tokio::process::Command::from(cmd).spawn().unwrap();
    let _unread = child.stdout.take();
    let status = tokio::time::timeout(WATCHDOG, child.wait())
        .await
        .expect("the run timeout did not end a run whose log reader stalled")
        .unwrap();
    assert_eq!(status.code(), Some(124));
    assert_eq!(case.result().status, executor_core::RunStatus::Timeout);

    let case = Case::new();
    let mut cmd = case.run(FLOOD, &["--log", "-"]);
    cmd.stdout(Stdio::piped());
    let mut child = tokio::process::Command::from(cmd).spawn().unwrap();
    let mut stdout = tokio::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.starts_with("0123456789") {
        line.clear();
        let n = tokio::io::AsyncBufReadExt::read_line(&mut stdout, &mut line)
            .await
            .unwrap();
        assert!(n > 0, "the run ended before its step printed");
    }
    // From here nobody reads: the pipe and the log's budget fill up.
    let pid = nix::unistd::Pid::from_raw(child.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = tokio::time::timeout(WATCHDOG, child.wait())
        .await
        .expect("SIGTERM did not end a run whose log reader stalled")
        .unwrap();
    assert_eq!(status.code(), Some(130));
    assert_eq!(case.result().status, executor_core::RunStatus::Cancelled);
    let left: Vec<_> = walkdir::WalkDir::new(case.path("roots"))
        .min_depth(2)
        .into_iter()
        .filter_map(Result::ok)
        .collect();
    assert!(left.is_empty(), "{left:?}");
    drop(stdout);
}

/// A second signal while the step is still being stopped (it ignores the
/// first one's SIGTERM for the grace the runner gives it) ends the runner
/// at once; the step that was running is `cancelled` in the result, the
/// one after it `skipped`.
#[test]
fn after_a_second_signal_the_running_step_is_cancelled_not_skipped() {
    let case = Case::new();
    let pid_file = case.path("step.pid");
    let script = format!(
        "stubborn\ttrap '' TERM INT; echo $$ > '{}'; echo waiting-for-signal; while :; do sleep 0.1; done\nafter\ttrue\n",
        pid_file.display()
    );
    let mut child = case
        .run(&script, &[])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    let mut read_until = |what: &str, said: &mut String| {
        while !said.contains(what) {
            let mut line = String::new();
            let n = std::io::BufRead::read_line(&mut err, &mut line).unwrap_or(0);
            assert!(n > 0, "no {what:?} in {said}");
            said.push_str(&line);
        }
    };
    read_until("step stubborn: started", &mut said);
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    read_until("cancelling the run", &mut said);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let status = child.wait().unwrap();
    // The step's shell, left running by design, is the test's to end.
    if let Ok(text) = std::fs::read_to_string(&pid_file) {
        if let Ok(step) = text.trim().parse::<i32>() {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(step),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
    assert_eq!(status.code(), Some(130), "{said}");
    let result = case.result();
    let statuses: Vec<_> = result
        .steps
        .iter()
        .map(|s| (s.name.as_str(), s.status))
        .collect();
    assert_eq!(
        statuses,
        [
            ("stubborn", executor_core::StepStatus::Cancelled),
            ("after", executor_core::StepStatus::Skipped)
        ],
        "{said}"
    );
}
