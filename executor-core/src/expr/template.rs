//! Texts with `${{ value }}` parts.

use std::fmt;

use super::{parse, ExprError, Scope, Value};

/// A text with `${{ value }}` parts: a variable's value computed when its
/// step starts (`"v${{ steps.version.outputs.number }}"`).
///
/// ```
/// use executor_core::expr::{Scope, Template};
/// let t = Template::parse("hello ${{ env.WHO }}!").unwrap();
/// let env = vec![("WHO".to_string(), "world".to_string())];
/// assert_eq!(t.render(&Scope { env: &env, ..Scope::default() }), "hello world!");
/// assert_eq!(t.to_string(), "hello ${{ env.WHO }}!");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

/// One piece of a [`Template`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// Text as written.
    Text(String),
    /// A value, resolved when the template is rendered.
    Value(Value),
}

impl Template {
    /// Reads a text with `${{ value }}` parts.
    ///
    /// # Errors
    /// [`ExprError`] at the first character not taken (an unclosed
    /// `${{`, a value this module does not take).
    pub fn parse(text: &str) -> Result<Self, ExprError> {
        parse::template(text).map(|parts| Template { parts })
    }

    /// A template of plain text.
    pub fn text(text: impl Into<String>) -> Self {
        Template {
            parts: vec![Part::Text(text.into())],
        }
    }

    /// Its pieces, in order.
    pub fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// Whether it has any `${{ }}` part.
    pub fn is_plain(&self) -> bool {
        self.parts.iter().all(|p| matches!(p, Part::Text(_)))
    }

    /// The text with every value resolved in `scope`.
    pub fn render(&self, scope: &Scope<'_>) -> String {
        self.parts
            .iter()
            .map(|part| match part {
                Part::Text(text) => text.clone(),
                Part::Value(value) => value.resolve(scope),
            })
            .collect()
    }

    /// Every value it names.
    pub fn values(&self) -> impl Iterator<Item = &Value> {
        self.parts.iter().filter_map(|p| match p {
            Part::Value(v) => Some(v),
            Part::Text(_) => None,
        })
    }
}

impl fmt::Display for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for part in &self.parts {
            match part {
                Part::Text(text) => f.write_str(text)?,
                Part::Value(value) => write!(f, "${{{{ {value} }}}}")?,
            }
        }
        Ok(())
    }
}
