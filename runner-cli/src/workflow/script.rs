//! A `run:` script's `${{ }}` parts made references the shell expands,
//! never text it reads as code; and the step's shell and folder.

use std::collections::BTreeMap;

use executor_core::expr::{ExprError, Part, Template, Value};
use executor_core::script::quote;

/// A script with its expressions made variable references, and what the
/// step must be given for them.
#[derive(Debug, Default)]
pub(super) struct Rewritten {
    pub(super) script: String,
    /// Variables computed when the step starts.
    pub(super) inputs: Vec<(String, Template)>,
    /// Secrets the script reads by name.
    pub(super) secrets: Vec<String>,
}

#[derive(Clone, Copy, PartialEq)]
enum Quoting {
    None,
    Single,
    Double,
}

/// Rewrites each `${{ value }}` of `script` into `${NAME}`, `NAME` being
/// the variable that holds the value when the step starts: the variable
/// itself for `env.NAME` and `secrets.NAME`, `KNOTLESS_JOB_STATUS` for
/// `job.status`, and a computed one for an output or a literal. Inside
/// single quotes the reference closes and reopens them, so the value
/// still arrives as it would in Actions, but as a value.
pub(super) fn rewrite(script: &str) -> Result<Rewritten, ExprError> {
    let template = Template::parse(script)?;
    let mut out = Rewritten::default();
    let mut names: BTreeMap<String, Value> = BTreeMap::new();
    let mut quoting = Quoting::None;
    let mut escaped = false;
    for part in template.parts() {
        match part {
            Part::Text(text) => {
                for c in text.chars() {
                    (quoting, escaped) = step(quoting, escaped, c);
                }
                out.script.push_str(text);
            }
            Part::Value(value) => {
                let name = variable_for(value, &mut names, &mut out);
                let reference = match quoting {
                    Quoting::Single => format!("'\"${{{name}}}\"'"),
                    _ => format!("${{{name}}}"),
                };
                out.script.push_str(&reference);
                escaped = false;
            }
        }
    }
    Ok(out)
}

fn step(quoting: Quoting, escaped: bool, c: char) -> (Quoting, bool) {
    match (quoting, escaped, c) {
        (Quoting::Single, _, '\'') => (Quoting::None, false),
        (Quoting::Single, _, _) => (Quoting::Single, false),
        (q, true, _) => (q, false),
        (q, false, '\\') => (q, true),
        (Quoting::None, false, '\'') => (Quoting::Single, false),
        (Quoting::None, false, '"') => (Quoting::Double, false),
        (Quoting::Double, false, '"') => (Quoting::None, false),
        (q, false, _) => (q, false),
    }
}

fn variable_for(value: &Value, names: &mut BTreeMap<String, Value>, out: &mut Rewritten) -> String {
    let computed = |base: String| {
        let base: String = base
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_uppercase()
                } else {
                    '_'
                }
            })
            .collect();
        base
    };
    let name = match value {
        Value::Env(name) => return name.clone(),
        Value::Secret(name) => {
            if !out.secrets.contains(name) {
                out.secrets.push(name.clone());
            }
            return name.clone();
        }
        Value::JobStatus => return "KNOTLESS_JOB_STATUS".to_string(),
        Value::StepOutput { step, name } => {
            computed(format!("KNOTLESS_STEPS_{step}_OUTPUTS_{name}"))
        }
        Value::Literal(_) => computed(format!("KNOTLESS_LITERAL_{}", names.len())),
    };
    let mut candidate = name.clone();
    let mut n = 1u32;
    loop {
        match names.get(&candidate) {
            Some(held) if held == value => return candidate,
            Some(_) => {
                n = n.saturating_add(1);
                candidate = format!("{name}_{n}");
            }
            None => break,
        }
    }
    names.insert(candidate.clone(), value.clone());
    out.inputs.push((
        candidate.clone(),
        Template::parse(&format!("${{{{ {value} }}}}")).unwrap_or_else(|_| Template::text("")),
    ));
    candidate
}

/// The shells a step may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shell {
    Sh,
    Bash,
}

impl Shell {
    pub(super) fn parse(name: &str) -> Option<Self> {
        match name.trim() {
            "sh" | "sh -e {0}" => Some(Shell::Sh),
            "bash" | "bash --noprofile --norc -eo pipefail {0}" => Some(Shell::Bash),
            _ => None,
        }
    }
}

/// The script as `sh -ec` runs it: in `folder` (relative to WORK_DIR)
/// and, for `bash`, handed to bash as Actions runs it
/// (`bash --noprofile --norc -eo pipefail`), after a check that says
/// which image has no bash.
pub(super) fn finish(
    script: &str,
    shell: Shell,
    folder: Option<&str>,
    image: Option<&str>,
) -> String {
    // On the script's first line, so the lines an error names are its own.
    let cd = folder.map_or(String::new(), |f| format!("cd -- {};", quote(f)));
    match shell {
        Shell::Sh => format!("{cd}{script}"),
        Shell::Bash => {
            let image = image.map_or("this step's image".to_string(), |i| {
                format!("the image {i}")
            });
            let missing = format!(
                "shell: bash: {image} has no bash; give the step shell: sh, or run an image with bash"
            );
            format!(
                "{cd}command -v bash >/dev/null 2>&1||{{ echo {} >&2;exit 127;}};exec bash --noprofile --norc -eo pipefail -c {} bash",
                quote(&missing),
                quote(script)
            )
        }
    }
}
