//! The checks of what steps' expressions name: ids, earlier steps'
//! outputs, secrets and the variables they set.

use std::collections::HashSet;

use crate::expr::{self, Value};
use crate::{ExecutorError, RunSpec};

/// Checks every step's id, condition and inputs against the run: an id is
/// a name used once, an output is read only from an earlier step's id, a
/// secret only by a name the run has.
pub(super) fn check(spec: &RunSpec) -> Result<(), ExecutorError> {
    let bad = |msg: String| Err(ExecutorError::InvalidInput(msg));
    let mut earlier: HashSet<&str> = HashSet::new();
    for (index, step) in spec.steps.iter().enumerate() {
        let at = format!("step {index} ({:?})", step.name);
        let values: Vec<&Value> = step
            .condition
            .iter()
            .flat_map(|c| c.values())
            .chain(step.inputs.iter().flat_map(|(_, t)| t.values()))
            .collect();
        for value in values {
            match value {
                Value::StepOutput { step: id, .. } if !earlier.contains(id.as_str()) => {
                    let later = spec
                        .steps
                        .iter()
                        .skip(index)
                        .any(|s| s.id.as_deref() == Some(id));
                    return bad(if later {
                        format!("{at} reads {value}, but step {id:?} runs at or after it: a step reads only earlier steps' outputs")
                    } else {
                        format!(
                            "{at} reads {value}, but no earlier step has the id {id:?} (Step::id)"
                        )
                    });
                }
                Value::Secret(name) if !spec.secrets.iter().any(|(k, _)| k == name) => {
                    return bad(format!(
                        "{at} reads {value}, but the run has no secret {name}: give it (RunSpec::secrets)"
                    ));
                }
                _ => {}
            }
        }
        for (key, _) in &step.inputs {
            super::validate_env_key(key)?;
            if spec.secrets.iter().any(|(k, _)| k == key) {
                return bad(format!(
                    "{at}: {key} is both a secret and a computed variable (Step::inputs); give it one value"
                ));
            }
        }
        if let Some(id) = &step.id {
            if !expr::name_ok(id) {
                return bad(format!(
                    "{at}: the id {id:?} is not a name: a letter or _, then letters, digits, _ or - (Step::id)"
                ));
            }
            if !earlier.insert(id) {
                return bad(format!(
                    "{at}: the id {id:?} is used by an earlier step too"
                ));
            }
        }
    }
    Ok(())
}
