//! A small YAML writer for printing objects in a dry-run.

use serde_json::Value;

/// `value` as block-style YAML.
pub fn to_yaml(value: &Value) -> String {
    let mut out = String::new();
    write(value, 0, &mut out);
    out
}

fn scalar(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => {
            let plain = !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=".contains(c))
                && !matches!(
                    s.as_str(),
                    "true" | "false" | "null" | "yes" | "no" | "on" | "off"
                )
                && s.parse::<f64>().is_err();
            if plain {
                s.clone()
            } else {
                serde_json::to_string(s).unwrap_or_default()
            }
        }
        _ => String::new(),
    }
}

fn is_empty_collection(v: &Value) -> bool {
    matches!(v, Value::Object(m) if m.is_empty()) || matches!(v, Value::Array(a) if a.is_empty())
}

fn write(value: &Value, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                match v {
                    Value::Object(_) | Value::Array(_) if !is_empty_collection(v) => {
                        out.push_str(&format!("{pad}{k}:\n"));
                        write(v, indent + 2, out);
                    }
                    Value::Object(_) => out.push_str(&format!("{pad}{k}: {{}}\n")),
                    Value::Array(_) => out.push_str(&format!("{pad}{k}: []\n")),
                    _ => out.push_str(&format!("{pad}{k}: {}\n", scalar(v))),
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                match item {
                    Value::Object(_) | Value::Array(_) if !is_empty_collection(item) => {
                        let mut inner = String::new();
                        write(item, indent + 2, &mut inner);
                        // The first line of the item goes after the dash.
                        let inner = inner.trim_start_matches(' ');
                        out.push_str(&format!("{pad}- {inner}"));
                    }
                    Value::Object(_) => out.push_str(&format!("{pad}- {{}}\n")),
                    Value::Array(_) => out.push_str(&format!("{pad}- []\n")),
                    _ => out.push_str(&format!("{pad}- {}\n", scalar(item))),
                }
            }
        }
        other => out.push_str(&format!("{pad}{}\n", scalar(other))),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn nested() {
        let v = serde_json::json!({"a": {"b": [1, {"c": "x y", "d": []}], "e": "true"}});
        assert_eq!(
            super::to_yaml(&v),
            "a:\n  b:\n    - 1\n    - c: \"x y\"\n      d: []\n  e: \"true\"\n"
        );
    }
}
