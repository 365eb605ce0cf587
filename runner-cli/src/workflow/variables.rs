//! A mapping of variables in the workflow file: plain values, values
//! computed when a step starts, and secrets under a name of their own.

use anyhow::{bail, Context};
use executor_core::expr::{Part, Template, Value};
use serde_yaml_ng::Mapping;

use super::place::expr_error;
use super::Workflow;

/// A mapping of variables: keys checked as `--env` checks them, values
/// strings, numbers or booleans (as GitHub Actions takes them). A value
/// with `${{ }}` is computed when each step starts (into `inputs`), or,
/// when it is exactly one secret, is that secret under its own name.
pub(super) fn variables(
    mapping: Option<Mapping>,
    at: &str,
    text: &str,
    into: &mut Workflow,
    inputs: &mut Vec<(String, Template)>,
) -> anyhow::Result<()> {
    use serde_yaml_ng::Value as Yaml;
    for (key, value) in mapping.unwrap_or_default() {
        let Yaml::String(key) = key else {
            bail!("{at}: a variable's name is not a string: {key:?}");
        };
        executor_core::validate_env_key(&key).with_context(|| format!("{at}: {key}"))?;
        let value = match value {
            Yaml::String(s) => s,
            Yaml::Number(n) => n.to_string(),
            Yaml::Bool(b) => b.to_string(),
            Yaml::Null => String::new(),
            _ => bail!("{at}: {key}: a value is a string, a number or a boolean"),
        };
        let template =
            Template::parse(&value).map_err(|e| expr_error(at, &key, &value, &e, text, 1))?;
        match template.parts() {
            [] | [Part::Text(_)] => into.env.push((key, value)),
            [Part::Value(Value::Secret(secret))] => {
                into.secrets.push((secret.clone(), format!("{at}: {key}")));
                into.secret_aliases.push((key, secret.clone()));
            }
            _ => {
                for value in template.values() {
                    if let Value::Secret(secret) = value {
                        into.secrets.push((secret.clone(), format!("{at}: {key}")));
                    }
                }
                inputs.push((key, template));
            }
        }
    }
    Ok(())
}
