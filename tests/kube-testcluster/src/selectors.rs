//! Label and field selectors, as the API server parses them.

use serde_json::Value;

use crate::status::ApiError;

#[derive(Debug, Clone, PartialEq)]
enum Req {
    Eq(String, String),
    Ne(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A label selector plus a field selector.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Selector {
    labels: Vec<Req>,
    fields: Vec<Req>,
}

impl Selector {
    /// Parses the `labelSelector` and `fieldSelector` query parameters.
    pub fn parse(labels: Option<&str>, fields: Option<&str>) -> Result<Self, ApiError> {
        Ok(Selector {
            labels: labels.map(parse_reqs).transpose()?.unwrap_or_default(),
            fields: fields.map(parse_reqs).transpose()?.unwrap_or_default(),
        })
    }

    /// Whether `object` matches both selectors.
    pub fn matches(&self, object: &Value) -> bool {
        let labels = &object["metadata"]["labels"];
        let label = |k: &str| labels.get(k).and_then(Value::as_str).map(str::to_string);
        let field = |k: &str| {
            let mut v = object;
            for part in k.split('.') {
                v = &v[part];
            }
            v.as_str().map(str::to_string)
        };
        self.labels.iter().all(|r| eval(r, &label)) && self.fields.iter().all(|r| eval(r, &field))
    }
}

fn eval(req: &Req, get: &dyn Fn(&str) -> Option<String>) -> bool {
    match req {
        Req::Eq(k, v) => get(k).as_deref() == Some(v.as_str()),
        Req::Ne(k, v) => get(k).as_deref() != Some(v.as_str()),
        Req::In(k, vs) => get(k).is_some_and(|x| vs.contains(&x)),
        Req::NotIn(k, vs) => get(k).is_none_or(|x| !vs.contains(&x)),
        Req::Exists(k) => get(k).is_some(),
        Req::NotExists(k) => get(k).is_none(),
    }
}

/// Splits on commas that are not inside a `(...)` set.
fn split_top(s: &str) -> Vec<&str> {
    let (mut depth, mut start, mut out) = (0i32, 0usize, Vec::new());
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn parse_reqs(s: &str) -> Result<Vec<Req>, ApiError> {
    let bad = || ApiError::bad_request(format!("unable to parse requirement: {s:?}"));
    let mut reqs = Vec::new();
    for part in split_top(s)
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        let set = |rest: &str| -> Result<Vec<String>, ApiError> {
            let inner = rest
                .trim()
                .strip_prefix('(')
                .and_then(|r| r.strip_suffix(')'))
                .ok_or_else(bad)?;
            Ok(inner.split(',').map(|v| v.trim().to_string()).collect())
        };
        let req = if let Some(k) = part.strip_prefix('!') {
            Req::NotExists(k.trim().to_string())
        } else if let Some((k, v)) = part.split_once("!=") {
            Req::Ne(k.trim().into(), v.trim().into())
        } else if let Some((k, v)) = part.split_once("==") {
            Req::Eq(k.trim().into(), v.trim().into())
        } else if let Some((k, v)) = part.split_once('=') {
            Req::Eq(k.trim().into(), v.trim().into())
        } else if let Some((k, rest)) = part.split_once(" notin ") {
            Req::NotIn(k.trim().into(), set(rest)?)
        } else if let Some((k, rest)) = part.split_once(" in ") {
            Req::In(k.trim().into(), set(rest)?)
        } else if part
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
        {
            Req::Exists(part.to_string())
        } else {
            return Err(bad());
        };
        reqs.push(req);
    }
    Ok(reqs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_and_field_selectors() {
        let pod = json!({"metadata": {"name": "p", "labels": {"a": "1", "b": "2"}}, "status": {"phase": "Running"}});
        let m = |l: Option<&str>, f: Option<&str>| Selector::parse(l, f).unwrap().matches(&pod);
        assert!(m(Some("a=1"), None));
        assert!(m(Some("a=1,b!=3"), None));
        assert!(m(Some("a in (1,5),!c"), None));
        assert!(!m(Some("b notin (2)"), None));
        assert!(m(Some("a"), Some("metadata.name=p,status.phase=Running")));
        assert!(!m(None, Some("metadata.name=q")));
    }
}
