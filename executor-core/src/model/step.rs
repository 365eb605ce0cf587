//! One step of a run.

use std::time::Duration;

use super::RunSpec;
use crate::expr::{Condition, RunState, Scope, Template};

/// What a step with an id runs before its script: the folder of its
/// outputs file, and the file, empty.
const OUTPUTS_PROLOGUE: &str = "mkdir -p \"${STEP_OUTPUT%/*}\";:>\"$STEP_OUTPUT\";";

/// The folder, in the environment's outputs folder, that holds the files
/// of steps' outputs ([`Step::id`]); it is taken out of the outputs the
/// run brings back.
pub const STEP_OUTPUTS_FOLDER: &str = ".knotless-step-outputs";

/// One step of a run: a shell script run as `sh -ec <script>`.
///
/// By default a step that fails ends the run: the steps after it are
/// skipped. [`Step::continue_on_error`] and [`Step::always`] change that,
/// as GitHub Actions' `continue-on-error: true` and `if: always()` do.
///
/// ```
/// use std::time::Duration;
/// use executor_core::Step;
/// let step = Step::new("build", "make all").env("CC", "clang");
/// assert_eq!(step.env, vec![("CC".to_string(), "clang".to_string())]);
///
/// let lint = Step::new("lint", "make lint").continue_on_error(true);
/// let upload = Step::new("upload", "cp report.xml /outputs/")
///     .always(true)
///     .timeout(Duration::from_secs(60));
/// assert!(lint.continue_on_error && upload.always);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Step {
    /// Unique name within the run.
    pub name: String,
    /// The script body given to `sh -ec`.
    pub script: String,
    /// Variables for this step only, applied after the run's variables.
    pub env: Vec<(String, String)>,
    /// This step's own limit, in place of [`RunSpec::step_timeout`].
    pub timeout: Option<Duration>,
    /// Whether the run goes on when this step fails: its failure (exit
    /// code, out of memory, its own timeout) is recorded in its result but
    /// is not the run's. An environment that is lost, a cancel or the run's
    /// timeout still end the run.
    pub continue_on_error: bool,
    /// Whether this step runs after an earlier step failed (an upload or
    /// teardown step). It does not run after a cancel, the run's timeout
    /// or a lost environment: there is no time or no place left for it.
    pub always: bool,
    /// The name later steps read this step's outputs by
    /// (`steps.ID.outputs.NAME` in a [`Condition`] or [`Template`]): the
    /// step writes `NAME=VALUE` lines to the file `$STEP_OUTPUT` (also
    /// `$GITHUB_OUTPUT`), and the driver reads them when it ends. A step
    /// without one gets `/dev/null` there.
    pub id: Option<String>,
    /// Whether the step runs, read when its turn comes, in place of the
    /// rule [`Step::always`] gives; a condition that names no status
    /// function holds only while the run succeeds, as in Actions.
    pub condition: Option<Condition>,
    /// Variables computed when the step starts (earlier steps' outputs,
    /// secrets, the run's status), after [`Step::env`]: a value is never
    /// pasted into the script, so none can become code.
    pub inputs: Vec<(String, Template)>,
}

impl Step {
    /// A step with no variables of its own, the run's step timeout, and
    /// ending the run when it fails.
    pub fn new(name: impl Into<String>, script: impl Into<String>) -> Self {
        Step {
            name: name.into(),
            script: script.into(),
            env: Vec::new(),
            timeout: None,
            continue_on_error: false,
            always: false,
            id: None,
            condition: None,
            inputs: Vec::new(),
        }
    }

    /// Sets [`Step::id`].
    ///
    /// ```
    /// use executor_core::{expr::Template, Step};
    /// let version = Step::new("version", "echo number=1.2 >> \"$STEP_OUTPUT\"").id("version");
    /// let tag = Step::new("tag", "git tag \"v$NUMBER\"")
    ///     .input("NUMBER", Template::parse("${{ steps.version.outputs.number }}").unwrap());
    /// assert_eq!(version.id.as_deref(), Some("version"));
    /// assert_eq!(tag.inputs.len(), 1);
    /// ```
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Sets [`Step::condition`].
    ///
    /// ```
    /// use executor_core::{expr::Condition, Step};
    /// let notify = Step::new("notify", "echo failed").when(Condition::parse("failure()").unwrap());
    /// assert!(notify.condition.is_some());
    /// ```
    pub fn when(mut self, condition: Condition) -> Self {
        self.condition = Some(condition);
        self
    }

    /// Adds one of [`Step::inputs`].
    pub fn input(mut self, key: impl Into<String>, value: Template) -> Self {
        self.inputs.push((key.into(), value));
        self
    }

    /// Whether the step runs in `scope` (its condition, or else the rule
    /// of [`Step::always`]).
    ///
    /// ```
    /// use executor_core::{expr::{RunState, Scope}, Step};
    /// let failed = Scope { state: RunState::Failed, ..Scope::default() };
    /// assert!(!Step::new("a", "true").runs_in(&failed));
    /// assert!(Step::new("a", "true").always(true).runs_in(&failed));
    /// ```
    pub fn runs_in(&self, scope: &Scope<'_>) -> bool {
        match &self.condition {
            Some(condition) => condition.holds(scope),
            None => {
                scope.state == RunState::Succeeded
                    || (self.always && scope.state == RunState::Failed)
            }
        }
    }

    /// The script as it runs: a step with an [`Step::id`] first makes its
    /// outputs file (on the script's first line, so the lines a shell
    /// error names are the script's own).
    ///
    /// ```
    /// let step = executor_core::Step::new("a", "echo x=1 >> \"$STEP_OUTPUT\"");
    /// assert_eq!(step.script_to_run(), step.script);
    /// assert!(step.clone().id("a").script_to_run().ends_with(&step.script));
    /// ```
    pub fn script_to_run(&self) -> std::borrow::Cow<'_, str> {
        match self.id {
            None => std::borrow::Cow::Borrowed(&self.script),
            Some(_) => std::borrow::Cow::Owned(format!("{OUTPUTS_PROLOGUE}{}", self.script)),
        }
    }

    /// Adds one variable for this step.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Sets [`Step::timeout`].
    pub fn timeout(mut self, limit: Duration) -> Self {
        self.timeout = Some(limit);
        self
    }

    /// Sets [`Step::continue_on_error`].
    pub fn continue_on_error(mut self, yes: bool) -> Self {
        self.continue_on_error = yes;
        self
    }

    /// Sets [`Step::always`].
    pub fn always(mut self, yes: bool) -> Self {
        self.always = yes;
        self
    }

    /// The limit of this step in `spec`: its own, or the run's.
    pub fn limit_in(&self, spec: &RunSpec) -> Duration {
        self.timeout.unwrap_or(spec.step_timeout)
    }
}
