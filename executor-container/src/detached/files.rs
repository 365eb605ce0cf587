//! The files of one step in the environment and the argv of every exec
//! that starts, follows, probes, reads or kills it.

use super::scripts::{BEGIN, FOLLOW, GATE, HEAD, START, STREAMS};
use executor_core::events::OutputStream;
use executor_core::script::{quote, Script};
use executor_core::usage::StepUsage;
use executor_core::ExecutorError;

/// The files of one step in the environment's state folder, all named
/// from one prefix, `stepio-ID`: `.pid` (the supervisor's pid and its
/// start time, the root of the kill), `.o` and `.e` (the pipes the step writes into), `.out` and
/// `.err` (what it wrote), `.status` (its exit status, once it ended),
/// and `.oom` where OOM kills were counted in the environment before the
/// step started (how many).
/// Each step's start removes the files of the steps before it, whose
/// ends the runner already has: the output on disk is one step's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepFiles {
    pub(super) prefix: String,
}
pub use executor_core::Offsets;

/// Where an environment's memory cgroup counts its OOM kills (an
/// `oom_kill N` line): cgroup v2's `memory.events`, v1's
/// `memory.oom_control`. The step's wrapper reads them as the step
/// starts; [`crate::container::oom`] reads them after.
pub const OOM_COUNTERS: &str =
    "/sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control";

/// What every start runs after [`HEAD`] and its own variables (`_kfl`,
/// the step shell's flags, and `_kpre`, its prelude): the same text for
/// every step, so a channel defines it once ([`super::channel_argv`]),
/// and made once per process: each step's start and its channel message
/// both need it.
pub(super) fn start_body() -> &'static str {
    static BODY: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        let follow = format!("o=0; e=0\n{FOLLOW}");
        START
            .replace("STREAMS", STREAMS)
            .replace("BEGIN", BEGIN)
            .replace("FOLLOW", &follow)
            .replace("OOM_COUNTERS", OOM_COUNTERS)
            .replace("USAGE_MAX", &executor_core::usage::MARKED_MAX.to_string())
    });
    &BODY
}

impl StepFiles {
    /// The files of the step `id` (unique within the run) in `state_dir`.
    pub fn new(state_dir: &str, id: &str) -> Self {
        StepFiles {
            prefix: format!("{}/stepio-{id}", state_dir.trim_end_matches('/')),
        }
    }

    /// The file holding the supervisor's pid and its start time (in clock
    /// ticks since boot, as `/proc/PID/stat` has it): what an interrupt
    /// kills, with every process under it, while a process of that pid
    /// still has that start time (pids are reused).
    pub fn pid_file(&self) -> String {
        format!("{}.pid", self.prefix)
    }

    /// The file holding the `oom_kill` count of the environment's memory
    /// cgroup (v2 `memory.events`, or v1 `memory.oom_control`) as the
    /// step started: a kill counted after it is the step's, not one an
    /// earlier step survived. Written only when the count is not 0, so
    /// a run with no OOM kill makes no more files; none means 0.
    pub fn oom_file(&self) -> String {
        format!("{}.oom", self.prefix)
    }

    /// The argv that starts the step: `script` runs as `sh -e` (a file)
    /// or `sh -ec` (inline) after `prelude` (exports, `cd DIR && `), with
    /// its processes' `oom_score_adj` raised to 1000 so the kernel picks
    /// the step, not the environment's keep-alive or the supervisor, when
    /// memory runs out. The exec exits with the step's status. Its last
    /// word is a fresh key for its end marks ([`end_key`](super::end_key)).
    pub fn start_argv(&self, prelude: &str, script: Script<'_>) -> Vec<String> {
        let (flags, arg) = match script {
            Script::Inline(text) => ("-ec", text),
            Script::File(path) => ("-e", path),
        };
        vec![
            "sh".into(),
            "-c".into(),
            format!(
                "{HEAD}_kfl={flags}; _kpre={}\n{}",
                quote(prelude),
                start_body()
            ),
            self.prefix.clone(),
            arg.into(),
            executor_core::labels::random_hex(16),
        ]
    }

    /// [`StepFiles::start_argv`](super::StepFiles::start_argv) opened ahead of its time: the exec's
    /// shell first reads one line from its stdin, and starts the step
    /// only if that line is `go` ([`GATE_OPEN`](super::GATE_OPEN)). Its stdin closed, or
    /// anything else, and it exits having started nothing, so a start
    /// opened for a step that never comes (an earlier one failed, the
    /// runner died) runs nothing.
    ///
    /// ```
    /// use executor_container::detached::{StepFiles, marks_its_end};
    /// use executor_core::script::{quote, Script};
    /// let files = StepFiles::new("/.knotless", "a1s1-00");
    /// let argv = files.gated_start_argv("", Script::File("/.knotless/step-ab.sh"));
    /// assert!(argv[2].starts_with("IFS= read -r _kgo"));
    /// assert!(marks_its_end(&argv));
    /// ```
    pub fn gated_start_argv(&self, prelude: &str, script: Script<'_>) -> Vec<String> {
        let mut argv = self.start_argv(prelude, script);
        argv[2] = format!("{GATE}\n{}", argv[2]);
        argv
    }

    /// The argv that sends the step's output on from `from` and exits 0
    /// once the step has ended, or [`FOLLOW_LOST`](super::FOLLOW_LOST). Its last word is a
    /// fresh key for its end marks ([`end_key`](super::end_key)).
    pub fn follow_argv(&self, from: Offsets) -> Vec<String> {
        vec![
            "sh".into(),
            "-c".into(),
            // `second` is the start's alone: a step variable of that name
            // reaches this exec's environment too.
            format!(
                "_kd=$0; o=$1; e=$2; _kkey=$3; second=\n{STREAMS}\n{BEGIN}\n{FOLLOW}\nmarked 0"
            ),
            self.prefix.clone(),
            from.stdout.to_string(),
            from.stderr.to_string(),
            executor_core::labels::random_hex(16),
        ]
    }

    /// The argv that prints the index of the oldest piece of `stream`
    /// still kept (nothing when there is none).
    pub fn oldest_argv(&self, stream: OutputStream) -> Vec<String> {
        let name = match stream {
            OutputStream::Stdout => "out",
            OutputStream::Stderr => "err",
        };
        vec![
            "sh".into(),
            "-c".into(),
            r#"m=; for g in "$0".[0-9]*; do [ -e "$g" ] || continue; i=${g##*.}; case "$i" in *[!0-9]*) continue;; esac; if [ -z "$m" ] || [ "$i" -lt "$m" ]; then m=$i; fi; done; echo "$m""#.into(),
            format!("{}.{name}", self.prefix),
        ]
    }

    /// The argv that exits 0 if the step was started (its pipes are
    /// there), 1 if not.
    pub fn started_argv(&self) -> Vec<String> {
        vec![
            "sh".into(),
            "-c".into(),
            r#"[ -p "$0.o" ]"#.into(),
            self.prefix.clone(),
        ]
    }

    /// The files of `step` in `state_dir`, named by its
    /// [`StepCommand::id`](executor_core::StepCommand::id).
    ///
    /// # Errors
    /// `InvalidInput` for an id that is empty, longer than 64 bytes, or
    /// has a byte other than a letter, digit, `.`, `_` or `-`: it names
    /// files.
    ///
    /// ```
    /// use executor_container::detached::StepFiles;
    /// use executor_core::StepCommand;
    /// let mut step = StepCommand::new("build", "make", vec![]);
    /// step.id = "a1s0".into();
    /// assert_eq!(StepFiles::of(&step, "/.knotless").unwrap().pid_file(), "/.knotless/stepio-a1s0.pid");
    /// step.id = "../x".into();
    /// assert!(StepFiles::of(&step, "/.knotless").is_err());
    /// ```
    pub fn of(step: &executor_core::StepCommand, state_dir: &str) -> Result<Self, ExecutorError> {
        let id = &step.id;
        let fine = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-');
        if id.is_empty() || id.len() > 64 || !id.bytes().all(fine) || id.starts_with('.') {
            return Err(ExecutorError::InvalidInput(format!(
                "step {}: StepCommand::id {id:?} names the step's files: use 1 to 64 letters, digits, '.', '_' or '-'",
                step.name
            )));
        }
        Ok(Self::new(state_dir, id))
    }

    /// The argv that prints the step's status file.
    pub fn status_argv(&self) -> Vec<String> {
        vec!["cat".into(), format!("{}.status", self.prefix)]
    }

    /// A POSIX `sh` script that kills the step's supervisor, every
    /// process under it, and what the step left behind that still writes
    /// its output.
    pub fn kill_script(&self) -> String {
        let (out, err) = (format!("{}.o", self.prefix), format!("{}.e", self.prefix));
        executor_core::script::kill_tree(&self.pid_file(), &[&out, &err])
    }
}

/// A status file's content as an exit status: a number from 0 to 255 and
/// perhaps a newline, nothing else (the file is in the step's reach).
///
/// ```
/// use executor_container::detached::parse_status;
/// assert_eq!(parse_status("137\n"), Some(137));
/// assert_eq!(parse_status("0"), Some(0));
/// assert_eq!(parse_status("-1\n"), None);
/// assert_eq!(parse_status("256\n"), None);
/// assert_eq!(parse_status(" 1\n"), None);
/// ```
pub fn parse_status(text: &str) -> Option<i32> {
    parse_status_line(text).map(|(status, _)| status)
}

/// A status file's content as an exit status and the step's usage after
/// it ([`StepUsage::from_marked`]): `STATUS USAGE` and perhaps a newline.
/// A status with usage that cannot be read is still the status.
///
/// ```
/// use executor_container::detached::parse_status_line;
/// let (status, usage) = parse_status_line("1 120 30 2048 0\n").unwrap();
/// assert_eq!((status, usage.map(|u| u.cpu_user_ms)), (1, Some(120)));
/// assert_eq!(parse_status_line("0 \n"), Some((0, None)));
/// assert_eq!(parse_status_line("0 x\n"), Some((0, None)));
/// assert_eq!(parse_status_line("x 1 2 3 4\n"), None);
/// ```
pub fn parse_status_line(text: &str) -> Option<(i32, Option<StepUsage>)> {
    let line = text.strip_suffix('\n').unwrap_or(text);
    let (digits, usage) = line.split_once(' ').unwrap_or((line, ""));
    if digits.is_empty() || digits.len() > 3 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let status = digits.parse::<i32>().ok().filter(|c| *c <= 255)?;
    Some((status, StepUsage::from_marked(usage)))
}

/// Whether the exec `argv` begins both its streams with [`BEGIN_MARK`](super::BEGIN_MARK)
/// and ends them with an end mark ([`end_mark`](super::end_mark)) when it runs to its end:
/// a step's start or a follow. A dry-run or a fake answers these with
/// both marks, as the environment would, and a backend may answer
/// [`ExecEnd::Ended`](super::ExecEnd::Ended) for them without asking for the code.
///
/// ```
/// use executor_container::detached::{marks_its_end, Offsets, StepFiles};
/// use executor_core::script::{quote, Script};
/// let files = StepFiles::new("/.knotless", "a1s0");
/// assert!(marks_its_end(&files.start_argv("", Script::Inline("true"))));
/// assert!(marks_its_end(&files.follow_argv(Offsets::default())));
/// assert!(!marks_its_end(&files.status_argv()));
/// ```
pub fn marks_its_end(argv: &[String]) -> bool {
    argv.get(2)
        .is_some_and(|script| script.contains("knotless-step-end"))
}
