//! `--result`, `--log` and `--events` pointing at what is not a regular
//! file: written into, left as it was, nothing made beside it. Every
//! target is one this test made in a folder of its own, never one of the
//! host's own devices.

use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};

use super::*;

/// A target of one kind, made in `dir`.
enum Target {
    /// A FIFO with a reader that opened it first (without waiting for a
    /// writer) and reads what the run wrote once the run is over: a
    /// small run's bytes fit in the pipe.
    Fifo(PathBuf, std::fs::File),
    /// A null device node of the test's own (root), else another FIFO.
    Device(PathBuf),
    /// This process's standard output, as the runner is given it.
    Stdout,
}

impl Target {
    fn fifo(dir: &Path, name: &str) -> Target {
        let path = dir.join(name);
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let reader = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NONBLOCK)
            .open(&path)
            .unwrap();
        Target::Fifo(path, reader)
    }

    fn device(dir: &Path, name: &str) -> Target {
        if !nix::unistd::geteuid().is_root() {
            return Target::fifo(dir, name);
        }
        let path = dir.join(name);
        nix::sys::stat::mknod(
            &path,
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::from_bits_truncate(0o666),
            nix::sys::stat::makedev(1, 3),
        )
        .unwrap();
        Target::Device(path)
    }

    fn arg(&self) -> String {
        match self {
            Target::Fifo(path, _) | Target::Device(path) => path.display().to_string(),
            Target::Stdout => "/dev/stdout".into(),
        }
    }

    /// What arrived through it (`None` for a device, which keeps nothing),
    /// after checking it is still what it was.
    fn arrived(self, stdout: &str) -> Option<String> {
        match self {
            Target::Fifo(path, mut reader) => {
                assert!(std::fs::metadata(&path).unwrap().file_type().is_fifo());
                let mut text = String::new();
                reader.read_to_string(&mut text).unwrap();
                Some(text)
            }
            Target::Device(path) => {
                let meta = std::fs::metadata(&path).unwrap();
                assert!(meta.file_type().is_char_device(), "{path:?} was replaced");
                None
            }
            Target::Stdout => Some(stdout.to_string()),
        }
    }
}

/// One run with its result, log and events at `targets`; checks that each
/// arrived where it could be read and that the folder holds only what the
/// test made.
fn run_into(dir: &Path, result: Target, log: Target, events: Target) {
    let case = Case::new();
    let before = names(dir);
    let out = case
        .run(
            "hello\techo hello from the step\n",
            &[
                "--result",
                &result.arg(),
                "--log",
                &log.arg(),
                "--events",
                &events.arg(),
            ],
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let warned = stderr(&out).matches("cannot be resumed").count();
    if let Some(text) = result.arrived(&stdout) {
        let parsed: RunResult = serde_json::from_str(text.trim()).expect("the result JSON");
        assert_valid_result(&parsed);
        assert_eq!(parsed.steps.len(), 1);
    }
    if let Some(text) = log.arrived(&stdout) {
        assert!(text.contains("hello from the step"), "{text}");
    }
    if let Some(text) = events.arrived(&stdout) {
        assert!(text.contains("\"runFinished\""), "{text}");
    }
    assert_eq!(warned, 1, "{}", stderr(&out));
    assert_eq!(names(dir), before, "something was made beside the targets");
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_device_a_fifo_and_stdout_are_each_written_into_and_left_as_they_were() {
    // Each flag once at each kind.
    let rotations: [[&str; 3]; 3] = [
        ["fifo", "stdout", "device"],
        ["device", "fifo", "stdout"],
        ["stdout", "device", "fifo"],
    ];
    for [result, log, events] in rotations {
        let dir = tempfile::tempdir().unwrap();
        let make = |kind: &str, name: &str| match kind {
            "fifo" => Target::fifo(dir.path(), name),
            "device" => Target::device(dir.path(), name),
            _ => Target::Stdout,
        };
        let (result, log, events) = (
            make(result, "result"),
            make(log, "log"),
            make(events, "events"),
        );
        run_into(dir.path(), result, log, events);
    }
}

#[test]
fn a_run_whose_log_is_not_a_file_cannot_be_resumed() {
    let dir = tempfile::tempdir().unwrap();
    let log = Target::device(dir.path(), "log");
    let out = bin()
        .args(["resume", "--executor", "docker", "--name", "cli-test"])
        .args(["--runner", "did:plc:cli-test", "--log", &log.arg()])
        .output()
        .unwrap();
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("cannot be resumed"),
        "{}",
        stderr(&out)
    );
    assert_eq!(names(dir.path()), ["log"]);
}

#[test]
fn a_target_in_a_missing_folder_is_refused_before_anything_starts() {
    for flag in ["--result", "--log", "--events"] {
        let case = Case::new();
        let target = case.path("missing/target");
        let out = case
            .run(
                "touch\ttouch ../ran\n",
                &[flag, &target.display().to_string()],
            )
            .output()
            .unwrap();
        assert_eq!(code(&out), 2, "{flag}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains(flag) && err.contains("does not exist"),
            "{err}"
        );
        assert!(
            !case.path("missing").exists(),
            "{flag}: the folder was made"
        );
        assert!(case.log().is_empty(), "{flag}: the run started");
    }
}
