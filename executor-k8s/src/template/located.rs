//! A YAML (or JSON) document as a JSON value, with the line each field
//! and item was written on, so a refusal can point into the file.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use serde_saphyr::Spanned;

/// A document's value and, per field path (`spec.containers[0].image`),
/// the line it starts on.
#[derive(Debug, Clone, Default)]
pub(crate) struct Located {
    pub(crate) value: Value,
    pub(crate) lines: BTreeMap<String, u64>,
}

/// One node as the parser gave it, each child with its place.
enum Node {
    Scalar(Value),
    Sequence(Vec<Spanned<Node>>),
    Mapping(Vec<(String, Spanned<Node>)>),
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a YAML value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Scalar(Value::Bool(v)))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Scalar(Value::from(v)))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Node, E> {
        Ok(Node::Scalar(Value::from(v)))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Node, E> {
        Ok(Node::Scalar(Value::from(v)))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Node, E> {
        Ok(Node::Scalar(Value::String(v.to_string())))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Node, E> {
        Ok(Node::Scalar(Value::String(v)))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node::Scalar(Value::Null))
    }
    fn visit_none<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node::Scalar(Value::Null))
    }
    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Node, D::Error> {
        Node::deserialize(deserializer)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Spanned<Node>>()? {
            items.push(item);
        }
        Ok(Node::Sequence(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut fields = Vec::new();
        while let Some(key) = map.next_key::<KeyText>()? {
            let value = map.next_value::<Spanned<Node>>()?;
            fields.push((key.0, value));
        }
        Ok(Node::Mapping(fields))
    }
}

/// A mapping's key, as text whatever its YAML type (`80: x` is the key `80`).
struct KeyText(String);

impl<'de> Deserialize<'de> for KeyText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match Node::deserialize(deserializer)? {
            Node::Scalar(Value::String(s)) => Ok(KeyText(s)),
            Node::Scalar(other) => Ok(KeyText(other.to_string())),
            _ => Err(de::Error::custom("a key must be a scalar")),
        }
    }
}

/// The path of `key` under `parent`, as Kubernetes names fields.
pub(crate) fn field(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

/// The path of item `index` under `parent`.
pub(crate) fn item(parent: &str, index: usize) -> String {
    format!("{parent}[{index}]")
}

fn flatten(node: Spanned<Node>, path: &str, lines: &mut BTreeMap<String, u64>) -> Value {
    lines.insert(path.to_string(), node.referenced.line());
    match node.value {
        Node::Scalar(v) => v,
        Node::Sequence(items) => Value::Array(
            items
                .into_iter()
                .enumerate()
                .map(|(i, n)| flatten(n, &item(path, i), lines))
                .collect(),
        ),
        Node::Mapping(fields) => Value::Object(
            fields
                .into_iter()
                .map(|(k, n)| {
                    let value = flatten(n, &field(path, &k), lines);
                    (k, value)
                })
                .collect(),
        ),
    }
}

impl Located {
    /// Parses `text`, YAML or JSON (JSON is YAML).
    ///
    /// The parser's message names the line and column of what it could
    /// not read.
    pub(crate) fn parse(text: &str) -> Result<Located, String> {
        let root: Spanned<Node> = serde_saphyr::from_str(text).map_err(|e| e.to_string())?;
        let mut lines = BTreeMap::new();
        let value = flatten(root, "", &mut lines);
        Ok(Located { value, lines })
    }

    /// The line `path` starts on; where it is not in the file (a field
    /// the file leaves out), the line of its nearest parent that is.
    pub(crate) fn line(&self, path: &str) -> Option<u64> {
        let mut path = path;
        loop {
            if let Some(line) = self.lines.get(path) {
                return Some(*line);
            }
            let cut = path.rfind(['.', '['])?;
            path = &path[..cut];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_and_item_has_its_line() {
        let text =
            "kind: Pod\nspec:\n  containers:\n    - name: run\n      image: x\n    - name: side\n";
        let located = Located::parse(text).unwrap();
        assert_eq!(located.value["spec"]["containers"][1]["name"], "side");
        assert_eq!(located.line("kind"), Some(1));
        assert_eq!(located.line("spec.containers[0].image"), Some(5));
        assert_eq!(located.line("spec.containers[1].name"), Some(6));
        // A field the file lacks points at its parent.
        assert_eq!(located.line("spec.containers[1].command"), Some(6));
    }

    #[test]
    fn json_is_read_with_lines() {
        let text = "{\n  \"spec\": {\n    \"runtimeClassName\": \"gvisor\"\n  }\n}\n";
        let located = Located::parse(text).unwrap();
        assert_eq!(located.value["spec"]["runtimeClassName"], "gvisor");
        assert_eq!(located.line("spec.runtimeClassName"), Some(3));
    }

    #[test]
    fn a_key_given_twice_is_refused() {
        let err = Located::parse("a: 1\na: 2\n").unwrap_err();
        assert!(err.contains("duplicate mapping key: a"), "{err}");
    }
}
