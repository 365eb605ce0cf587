//! Expressions a run's steps carry: `if:` conditions and the values of
//! variables computed when a step starts, in the `${{ ... }}` syntax a
//! GitHub Actions user writes.
//!
//! Only what can never become code is taken: a [`Value`] is a variable of
//! the run (`env.NAME`), a secret (`secrets.NAME`), an earlier step's
//! output (`steps.ID.outputs.NAME`), the run's status (`job.status`) or a
//! string literal; a [`Condition`] combines `success()`, `failure()`,
//! `always()`, `cancelled()`, `!`, `&&`, `||`, parentheses and `==`/`!=`
//! comparisons of values. Values are resolved by the runner into plain
//! strings; nothing here ever produces script text.
//!
//! ```
//! use executor_core::expr::{Condition, Scope, RunState};
//! let cond = Condition::parse("failure() && env.NOTIFY == 'yes'").unwrap();
//! let env = vec![("NOTIFY".to_string(), "YES".to_string())];
//! let scope = Scope { env: &env, state: RunState::Failed, ..Scope::default() };
//! // Comparisons ignore case, as Actions' do.
//! assert!(cond.holds(&scope));
//! assert!(!cond.holds(&Scope { state: RunState::Succeeded, ..scope }));
//! ```
//!
//! The parser is written by hand: the grammar is a dozen rules, and a
//! general expression crate would take (and so have to refuse again)
//! everything this module exists to leave out.

mod outputs;
mod parse;
mod template;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;

use crate::mask::Secret;

pub use outputs::{name_ok, read_outputs};
pub use template::{Part, Template};

/// An expression that could not be read: where in its text, and why.
///
/// ```
/// let err = executor_core::expr::Condition::parse("github.sha == 'x'").unwrap_err();
/// assert_eq!(err.column, 1);
/// assert!(err.to_string().contains("github"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("column {column}: {message}")]
pub struct ExprError {
    /// 1-based character column in the text given to the parser.
    pub column: usize,
    /// What is wrong and what is taken instead.
    pub message: String,
}

/// A value an expression names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// `env.NAME`: a variable of the run or of the step.
    Env(String),
    /// `secrets.NAME`: a secret of the run.
    Secret(String),
    /// `steps.ID.outputs.NAME`: an output an earlier step wrote.
    StepOutput {
        /// The earlier step's [`Step::id`](crate::Step::id).
        step: String,
        /// The output's name.
        name: String,
    },
    /// `job.status`: `success`, `failure` or `cancelled`.
    JobStatus,
    /// A string literal, `'...'` (a quote inside written twice).
    Literal(String),
}

impl Value {
    /// Reads the one value in `text` (`env.HOME`, `'a literal'`), with or
    /// without `${{ }}` around it.
    ///
    /// # Errors
    /// [`ExprError`] at the first character not taken.
    pub fn parse(text: &str) -> Result<Self, ExprError> {
        parse::value_only(text)
    }

    /// The value in `scope`; a name that has none is the empty string
    /// (as Actions gives one).
    pub fn resolve(&self, scope: &Scope<'_>) -> String {
        match self {
            Value::Env(name) => lookup(scope.env, name).unwrap_or_default(),
            Value::Secret(name) => scope
                .secrets
                .iter()
                .rev()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.expose().to_string())
                .unwrap_or_default(),
            Value::StepOutput { step, name } => scope
                .outputs
                .and_then(|o| o.get(step))
                .and_then(|o| o.get(name))
                .cloned()
                .unwrap_or_default(),
            Value::JobStatus => scope.state.job_status().to_string(),
            Value::Literal(text) => text.clone(),
        }
    }

    /// The earlier step this value reads an output of, if it does.
    pub fn step(&self) -> Option<&str> {
        match self {
            Value::StepOutput { step, .. } => Some(step),
            _ => None,
        }
    }
}

fn lookup(vars: &[(String, String)], name: &str) -> Option<String> {
    // The last definition wins: a step's own variables come after the run's.
    vars.iter()
        .rev()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Env(name) => write!(f, "env.{name}"),
            Value::Secret(name) => write!(f, "secrets.{name}"),
            Value::StepOutput { step, name } => write!(f, "steps.{step}.outputs.{name}"),
            Value::JobStatus => f.write_str("job.status"),
            Value::Literal(text) => write!(f, "'{}'", text.replace('\'', "''")),
        }
    }
}

/// How the run stands when a step's condition is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RunState {
    /// Every step so far succeeded (or failed and continues on error).
    #[default]
    Succeeded,
    /// A step failed.
    Failed,
    /// The run was cancelled. The driver starts no step after a cancel,
    /// so a condition never meets this state in a run; it is here for
    /// embedders that read conditions themselves.
    Cancelled,
}

impl RunState {
    /// What `job.status` says: `success`, `failure` or `cancelled`.
    pub fn job_status(self) -> &'static str {
        match self {
            RunState::Succeeded => "success",
            RunState::Failed => "failure",
            RunState::Cancelled => "cancelled",
        }
    }
}

/// What an expression is read against.
#[derive(Debug, Clone, Copy, Default)]
pub struct Scope<'a> {
    /// The variables, in order (the last of a name wins).
    pub env: &'a [(String, String)],
    /// The run's secrets.
    pub secrets: &'a [(String, Secret)],
    /// Earlier steps' outputs, by step id then output name.
    pub outputs: Option<&'a BTreeMap<String, BTreeMap<String, String>>>,
    /// How the run stands.
    pub state: RunState,
}

/// A step's `if:`: whether it runs, given how the run stands.
///
/// A condition that names none of `success()`, `failure()`, `always()`,
/// `cancelled()` holds only while the run succeeds, as in Actions:
/// `env.DEPLOY == 'yes'` is read as `success() && env.DEPLOY == 'yes'`.
///
/// ```
/// use executor_core::expr::{Condition, RunState, Scope};
/// let always = Condition::parse("${{ always() }}").unwrap();
/// assert!(always.holds(&Scope { state: RunState::Failed, ..Scope::default() }));
/// assert_eq!(always.to_string(), "always()");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    node: Node,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Node {
    Success,
    Failure,
    Always,
    Cancelled,
    Not(Box<Node>),
    And(Box<Node>, Box<Node>),
    Or(Box<Node>, Box<Node>),
    Compare {
        left: Value,
        right: Value,
        equal: bool,
    },
}

impl Condition {
    /// Reads a condition, with or without `${{ }}` around it.
    ///
    /// # Errors
    /// [`ExprError`] at the first character not taken, saying what is.
    pub fn parse(text: &str) -> Result<Self, ExprError> {
        parse::condition(text).map(|node| Condition { node })
    }

    /// `always()`, what [`Step::always`](crate::Step::always) means.
    pub fn always() -> Self {
        Condition { node: Node::Always }
    }

    /// Whether the step runs in `scope`.
    pub fn holds(&self, scope: &Scope<'_>) -> bool {
        let explicit = self.node.names_status();
        let value = self.node.eval(scope);
        if explicit {
            value
        } else {
            scope.state == RunState::Succeeded && value
        }
    }

    /// Every value the condition compares.
    pub fn values(&self) -> Vec<&Value> {
        let mut out = Vec::new();
        self.node.collect(&mut out);
        out
    }
}

impl Node {
    fn names_status(&self) -> bool {
        match self {
            Node::Success | Node::Failure | Node::Always | Node::Cancelled => true,
            Node::Not(inner) => inner.names_status(),
            Node::And(a, b) | Node::Or(a, b) => a.names_status() || b.names_status(),
            // As in Actions, `job.status` is a value, not a status check:
            // `job.status == 'failure'` alone holds only while the run
            // succeeds, so never.
            Node::Compare { .. } => false,
        }
    }

    fn eval(&self, scope: &Scope<'_>) -> bool {
        match self {
            Node::Success => scope.state == RunState::Succeeded,
            Node::Failure => scope.state == RunState::Failed,
            Node::Always => true,
            Node::Cancelled => scope.state == RunState::Cancelled,
            Node::Not(inner) => !inner.eval(scope),
            Node::And(a, b) => a.eval(scope) && b.eval(scope),
            Node::Or(a, b) => a.eval(scope) || b.eval(scope),
            Node::Compare { left, right, equal } => {
                let same = left
                    .resolve(scope)
                    .to_lowercase()
                    .eq(&right.resolve(scope).to_lowercase());
                same == *equal
            }
        }
    }

    fn collect<'a>(&'a self, out: &mut Vec<&'a Value>) {
        match self {
            Node::Not(inner) => inner.collect(out),
            Node::And(a, b) | Node::Or(a, b) => {
                a.collect(out);
                b.collect(out);
            }
            Node::Compare { left, right, .. } => {
                out.push(left);
                out.push(right);
            }
            _ => {}
        }
    }

    fn precedence(&self) -> u8 {
        match self {
            Node::Or(..) => 1,
            Node::And(..) => 2,
            Node::Compare { .. } => 3,
            _ => 4,
        }
    }
}

impl fmt::Display for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.node.fmt(f)
    }
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let child = |f: &mut fmt::Formatter<'_>, node: &Node, min: u8| {
            if node.precedence() < min {
                write!(f, "({node})")
            } else {
                write!(f, "{node}")
            }
        };
        match self {
            Node::Success => f.write_str("success()"),
            Node::Failure => f.write_str("failure()"),
            Node::Always => f.write_str("always()"),
            Node::Cancelled => f.write_str("cancelled()"),
            Node::Not(inner) => {
                f.write_str("!")?;
                child(f, inner, 4)
            }
            Node::And(a, b) => {
                child(f, a, 2)?;
                f.write_str(" && ")?;
                child(f, b, 3)
            }
            Node::Or(a, b) => {
                child(f, a, 1)?;
                f.write_str(" || ")?;
                child(f, b, 2)
            }
            Node::Compare { left, right, equal } => {
                let op = if *equal { "==" } else { "!=" };
                write!(f, "{left} {op} {right}")
            }
        }
    }
}
