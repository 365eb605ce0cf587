//! The reader of expressions: a tokenizer that keeps each token's column,
//! and a recursive descent over `||`, `&&`, `!`, comparisons and values.

use super::{ExprError, Node, Part, Value};

const VALUES: &str = "this runner reads env.NAME, secrets.NAME, steps.ID.outputs.NAME, job.status \
                      and 'string literals'";
const CALLS: &str = "conditions call success(), failure(), always() or cancelled()";

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Open,
    Close,
    Not,
    And,
    Or,
    Equal,
    NotEqual,
    Literal(String),
    /// A dotted name; `call` when `()` follows it.
    Name {
        parts: Vec<String>,
        call: bool,
    },
}

/// A token and its 1-based column.
type Placed = (Token, usize);

fn error(column: usize, message: impl Into<String>) -> ExprError {
    ExprError {
        column,
        message: message.into(),
    }
}

/// The text inside `${{ }}` when `text` is wrapped in one, and the column
/// its first character has in `text`.
fn unwrap(text: &str) -> (&str, usize) {
    let lead = text.len().saturating_sub(text.trim_start().len());
    let trimmed = text.trim();
    match trimmed
        .strip_prefix("${{")
        .and_then(|t| t.strip_suffix("}}"))
    {
        Some(inner) => (inner, text[..lead].chars().count().saturating_add(3)),
        None => (text, 0),
    }
}

fn tokens(text: &str, base: usize) -> Result<Vec<Placed>, ExprError> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0usize;
    let column = |i: usize| base.saturating_add(i).saturating_add(1);
    while let Some(&c) = chars.get(i) {
        let at = column(i);
        let next = chars.get(i.saturating_add(1)).copied();
        let two = |t: Token| (t, 2usize);
        let (token, width) = match (c, next) {
            (c, _) if c.is_whitespace() => {
                i = i.saturating_add(1);
                continue;
            }
            ('(', _) => (Token::Open, 1),
            (')', _) => (Token::Close, 1),
            ('&', Some('&')) => two(Token::And),
            ('|', Some('|')) => two(Token::Or),
            ('=', Some('=')) => two(Token::Equal),
            ('!', Some('=')) => two(Token::NotEqual),
            ('!', _) => (Token::Not, 1),
            ('\'', _) => {
                let mut text = String::new();
                let mut j = i.saturating_add(1);
                loop {
                    match chars.get(j) {
                        None => return Err(error(at, "this string has no closing '")),
                        Some('\'') if chars.get(j.saturating_add(1)) == Some(&'\'') => {
                            text.push('\'');
                            j = j.saturating_add(2);
                        }
                        Some('\'') => break,
                        Some(&c) => {
                            text.push(c);
                            j = j.saturating_add(1);
                        }
                    }
                }
                let width = j.saturating_add(1).saturating_sub(i);
                (Token::Literal(text), width)
            }
            ('"', _) => {
                return Err(error(
                    at,
                    "strings are written in single quotes ('text'), as in Actions",
                ))
            }
            (c, _) if c.is_ascii_alphabetic() || c == '_' => {
                let mut j = i;
                let mut parts = Vec::new();
                loop {
                    let start = j;
                    while chars
                        .get(j)
                        .is_some_and(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
                    {
                        j = j.saturating_add(1);
                    }
                    if start == j {
                        return Err(error(column(j), "a name is expected after this '.'"));
                    }
                    parts.push(chars[start..j].iter().collect::<String>());
                    if chars.get(j) == Some(&'.') {
                        j = j.saturating_add(1);
                    } else {
                        break;
                    }
                }
                let mut k = j;
                while chars.get(k).is_some_and(|c| c.is_whitespace()) {
                    k = k.saturating_add(1);
                }
                let mut call = false;
                if chars.get(k) == Some(&'(') {
                    let mut m = k.saturating_add(1);
                    while chars.get(m).is_some_and(|c| c.is_whitespace()) {
                        m = m.saturating_add(1);
                    }
                    if chars.get(m) != Some(&')') {
                        return Err(error(
                            at,
                            format!(
                                "{}(...) is not taken: {CALLS}, with nothing between the parentheses",
                                parts.join(".")
                            ),
                        ));
                    }
                    call = true;
                    j = m.saturating_add(1);
                }
                (Token::Name { parts, call }, j.saturating_sub(i))
            }
            (c, _) => {
                return Err(error(
                    at,
                    format!("{c:?} is not taken here: {VALUES}, joined by !, &&, ||, == and !="),
                ))
            }
        };
        out.push((token, at));
        i = i.saturating_add(width);
    }
    Ok(out)
}

struct Parser {
    tokens: Vec<Placed>,
    at: usize,
    /// The column just past the text, for "expected ... at the end".
    end: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Placed> {
        self.tokens.get(self.at)
    }

    fn column(&self) -> usize {
        self.peek().map_or(self.end, |(_, c)| *c)
    }

    fn bump(&mut self) -> Option<Placed> {
        let token = self.tokens.get(self.at).cloned();
        self.at = self.at.saturating_add(1);
        token
    }

    fn or(&mut self) -> Result<Node, ExprError> {
        let mut left = self.and()?;
        while matches!(self.peek(), Some((Token::Or, _))) {
            self.bump();
            let right = self.and()?;
            left = Node::Or(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Node, ExprError> {
        let mut left = self.unary()?;
        while matches!(self.peek(), Some((Token::And, _))) {
            self.bump();
            let right = self.unary()?;
            left = Node::And(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn unary(&mut self) -> Result<Node, ExprError> {
        match self.peek() {
            Some((Token::Not, _)) => {
                self.bump();
                Ok(Node::Not(Box::new(self.unary()?)))
            }
            Some((Token::Open, at)) => {
                let at = *at;
                self.bump();
                let inner = self.or()?;
                match self.bump() {
                    Some((Token::Close, _)) => Ok(inner),
                    _ => Err(error(at, "this '(' has no ')' closing it")),
                }
            }
            Some((Token::Name { parts, call: true }, at)) => {
                let at = *at;
                let node = match parts.join(".").as_str() {
                    "success" => Node::Success,
                    "failure" => Node::Failure,
                    "always" => Node::Always,
                    "cancelled" => Node::Cancelled,
                    other => return Err(error(at, format!("{other}() is not taken: {CALLS}"))),
                };
                self.bump();
                Ok(node)
            }
            Some(_) => {
                let left_at = self.column();
                let left = self.value()?;
                let equal = match self.peek() {
                    Some((Token::Equal, _)) => true,
                    Some((Token::NotEqual, _)) => false,
                    _ => {
                        return Err(error(
                            left_at,
                            format!(
                                "{left} alone is not a condition: compare it with a string \
                                 ({left} == 'text') or use {CALLS}"
                            ),
                        ))
                    }
                };
                self.bump();
                let right = self.value()?;
                Ok(Node::Compare { left, right, equal })
            }
            None => Err(error(self.end, "a condition is expected here")),
        }
    }

    fn value(&mut self) -> Result<Value, ExprError> {
        let Some((token, at)) = self.bump() else {
            return Err(error(
                self.end,
                format!("a value is expected here: {VALUES}"),
            ));
        };
        match token {
            Token::Literal(text) => Ok(Value::Literal(text)),
            Token::Name { parts, call: false } => name_value(&parts, at),
            Token::Name { parts, call: true } => Err(error(
                at,
                format!(
                    "{}() is a condition, not a value: {VALUES}",
                    parts.join(".")
                ),
            )),
            _ => Err(error(at, format!("a value is expected here: {VALUES}"))),
        }
    }
}

fn name_value(parts: &[String], at: usize) -> Result<Value, ExprError> {
    let strs: Vec<&str> = parts.iter().map(String::as_str).collect();
    match strs[..] {
        ["env", name] => Ok(Value::Env(name.to_string())),
        ["secrets", name] => Ok(Value::Secret(name.to_string())),
        ["steps", step, "outputs", name] => Ok(Value::StepOutput {
            step: step.to_string(),
            name: name.to_string(),
        }),
        ["job", "status"] => Ok(Value::JobStatus),
        ["true" | "false" | "null"] => Err(error(
            at,
            format!(
                "{} is not taken: compare with a string literal ('{}')",
                strs[0], strs[0]
            ),
        )),
        _ => Err(error(
            at,
            format!("{} is not taken: {VALUES}", parts.join(".")),
        )),
    }
}

fn parser(text: &str) -> Result<Parser, ExprError> {
    let (inner, base) = unwrap(text);
    let tokens = tokens(inner, base)?;
    let end = base.saturating_add(inner.chars().count()).saturating_add(1);
    Ok(Parser { tokens, at: 0, end })
}

fn finish(parser: &Parser) -> Result<(), ExprError> {
    match parser.peek() {
        None => Ok(()),
        Some((_, at)) => Err(error(
            *at,
            "this is not taken after a whole expression: join two with && or ||",
        )),
    }
}

pub(super) fn condition(text: &str) -> Result<Node, ExprError> {
    let mut parser = parser(text)?;
    if parser.tokens.is_empty() {
        return Err(error(1, "the condition is empty"));
    }
    let node = parser.or()?;
    finish(&parser)?;
    Ok(node)
}

pub(super) fn value_only(text: &str) -> Result<Value, ExprError> {
    let mut parser = parser(text)?;
    let value = parser.value()?;
    finish(&parser)?;
    Ok(value)
}

/// Splits `text` at its `${{ }}` parts, each read as one value.
pub(super) fn template(text: &str) -> Result<Vec<Part>, ExprError> {
    let mut parts = Vec::new();
    let mut rest = text;
    // Characters of `text` before `rest`, for columns.
    let mut consumed = 0usize;
    while let Some(open) = rest.find("${{") {
        let before = &rest[..open];
        if !before.is_empty() {
            parts.push(Part::Text(before.to_string()));
        }
        let open_column = consumed
            .saturating_add(before.chars().count())
            .saturating_add(1);
        let inner_start = open.saturating_add(3);
        let Some(close) = closing(&rest[inner_start..]) else {
            return Err(error(open_column, "this ${{ has no closing }}"));
        };
        let inner = &rest[inner_start..inner_start.saturating_add(close)];
        let base = open_column.saturating_add(2);
        let tokens = tokens(inner, base)?;
        let end = base.saturating_add(inner.chars().count()).saturating_add(1);
        let mut parser = Parser { tokens, at: 0, end };
        let value = match parser.peek() {
            Some((Token::Name { call: true, .. }, _))
            | Some((Token::Not, _))
            | Some((Token::Open, _)) => {
                return Err(error(
                    parser.column(),
                    format!(
                        "only a value is taken inside ${{{{ }}}} here, not a condition: {VALUES}"
                    ),
                ))
            }
            _ => parser.value()?,
        };
        if let Some((_, at)) = parser.peek() {
            return Err(error(
                *at,
                format!("only one value is taken inside ${{{{ }}}} here: {VALUES}"),
            ));
        }
        parts.push(Part::Value(value));
        let after = inner_start.saturating_add(close).saturating_add(2);
        consumed = consumed.saturating_add(rest[..after].chars().count());
        rest = &rest[after..];
    }
    if !rest.is_empty() {
        parts.push(Part::Text(rest.to_string()));
    }
    Ok(parts)
}

/// Where the `}}` that closes an expression is, outside string literals.
fn closing(text: &str) -> Option<usize> {
    let mut in_string = false;
    let bytes = text.as_bytes();
    let mut i = 0usize;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'\'' => in_string = !in_string,
            b'}' if !in_string && bytes.get(i.saturating_add(1)) == Some(&b'}') => return Some(i),
            _ => {}
        }
        i = i.saturating_add(1);
    }
    None
}
