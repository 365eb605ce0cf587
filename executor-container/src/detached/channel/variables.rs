//! The step's variables in its start's prelude: those a shell can set.

use executor_core::script::quote;

/// The prelude ([`StepFiles::start_argv`](crate::detached::StepFiles::start_argv))
/// that exports `env` for the step's shell, and the variables it leaves
/// out, whose names a shell cannot set: those need an exec's own
/// settings.
///
/// ```
/// use executor_container::detached::variables_prelude;
/// let env = [("A".to_string(), "it's".to_string()), ("a-b".to_string(), "x".to_string())];
/// let (prelude, left) = variables_prelude(&env);
/// assert_eq!(prelude, "export A='it'\\''s'; ");
/// assert_eq!(left, [("a-b".to_string(), "x".to_string())]);
/// ```
pub fn variables_prelude(env: &[(String, String)]) -> (String, Vec<(String, String)>) {
    let mut prelude = String::new();
    let mut left = Vec::new();
    for (name, value) in env {
        if is_variable_name(name) {
            prelude.push_str(&format!("export {name}={}; ", quote(value)));
        } else {
            left.push((name.clone(), value.clone()));
        }
    }
    (prelude, left)
}

/// Whether `name` is a variable name a shell can set: a step whose
/// variables all are can have them set in its start's prelude
/// ([`variables_prelude`]) and start through a channel.
///
/// ```
/// use executor_container::detached::is_variable_name;
/// assert!(is_variable_name("CARGO_HOME") && is_variable_name("_x1"));
/// assert!(!is_variable_name("1x") && !is_variable_name("a-b") && !is_variable_name(""));
/// ```
pub fn is_variable_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b == b'_' || b.is_ascii_alphabetic())
        && bytes.all(|b| b == b'_' || b.is_ascii_alphanumeric())
}
