//! Kubernetes' protobuf encoding of request bodies, as far as the clients
//! the tests drive send it: kubectl's typed clients send a built-in
//! object (`kubectl create job`) and a `SelfSubjectAccessReview` as
//! protobuf, where a real server takes it as it takes JSON.
//!
//! A body is the magic `k8s\0` and an `Unknown` envelope (field 1 its
//! `TypeMeta`, field 2 the object's bytes). The object is read by a
//! schema of the fields this server models ([`JOB`]) into the JSON a
//! JSON client would have sent. gogo-protobuf writes every field that is
//! not a pointer, empty or not; a field the schema does not know that
//! holds something is refused by number, never dropped: a model that
//! quietly lost a volume would pass what a real server does not.

use serde_json::{json, Map, Value};

/// How a field's value is read.
#[derive(Clone, Copy)]
enum Ty {
    Str,
    Int,
    Bool,
    /// A message of its own fields.
    Msg(&'static [Field]),
    /// `map<string, string>`: repeated entries of key 1, value 2.
    StrMap,
    /// `map<string, Quantity>`: a quantity is a message whose field 1 is
    /// its text.
    QuantityMap,
}

/// One field of a message: its number, JSON name, type, and whether it
/// repeats (a JSON list).
#[derive(Clone, Copy)]
struct Field(u64, &'static str, Ty, bool);

const fn one(n: u64, name: &'static str, ty: Ty) -> Field {
    Field(n, name, ty, false)
}

const fn many(n: u64, name: &'static str, ty: Ty) -> Field {
    Field(n, name, ty, true)
}

const OBJECT_META: &[Field] = &[
    one(1, "name", Ty::Str),
    one(2, "generateName", Ty::Str),
    one(3, "namespace", Ty::Str),
    one(11, "labels", Ty::StrMap),
    one(12, "annotations", Ty::StrMap),
];

const ENV_VAR: &[Field] = &[one(1, "name", Ty::Str), one(2, "value", Ty::Str)];

const RESOURCES: &[Field] = &[
    one(1, "limits", Ty::QuantityMap),
    one(2, "requests", Ty::QuantityMap),
];

const CONTAINER: &[Field] = &[
    one(1, "name", Ty::Str),
    one(2, "image", Ty::Str),
    many(3, "command", Ty::Str),
    many(4, "args", Ty::Str),
    one(5, "workingDir", Ty::Str),
    many(7, "env", Ty::Msg(ENV_VAR)),
    one(8, "resources", Ty::Msg(RESOURCES)),
    one(13, "terminationMessagePath", Ty::Str),
    one(14, "imagePullPolicy", Ty::Str),
    one(16, "stdin", Ty::Bool),
    one(17, "stdinOnce", Ty::Bool),
    one(18, "tty", Ty::Bool),
    one(20, "terminationMessagePolicy", Ty::Str),
];

const POD_SPEC: &[Field] = &[
    many(2, "containers", Ty::Msg(CONTAINER)),
    one(3, "restartPolicy", Ty::Str),
    one(4, "terminationGracePeriodSeconds", Ty::Int),
    one(5, "activeDeadlineSeconds", Ty::Int),
    one(6, "dnsPolicy", Ty::Str),
    one(7, "nodeSelector", Ty::StrMap),
    one(8, "serviceAccountName", Ty::Str),
    one(9, "serviceAccount", Ty::Str),
    one(10, "nodeName", Ty::Str),
    one(11, "hostNetwork", Ty::Bool),
    one(12, "hostPID", Ty::Bool),
    one(13, "hostIPC", Ty::Bool),
    one(16, "hostname", Ty::Str),
    one(17, "subdomain", Ty::Str),
    one(19, "schedulerName", Ty::Str),
    many(20, "initContainers", Ty::Msg(CONTAINER)),
    one(21, "automountServiceAccountToken", Ty::Bool),
    one(24, "priorityClassName", Ty::Str),
];

const POD_TEMPLATE_SPEC: &[Field] = &[
    one(1, "metadata", Ty::Msg(OBJECT_META)),
    one(2, "spec", Ty::Msg(POD_SPEC)),
];

const JOB_SPEC: &[Field] = &[
    one(1, "parallelism", Ty::Int),
    one(2, "completions", Ty::Int),
    one(3, "activeDeadlineSeconds", Ty::Int),
    one(6, "template", Ty::Msg(POD_TEMPLATE_SPEC)),
    one(7, "backoffLimit", Ty::Int),
    one(8, "ttlSecondsAfterFinished", Ty::Int),
    one(9, "completionMode", Ty::Str),
    one(10, "suspend", Ty::Bool),
];

/// `batch/v1` `Job`: its metadata and spec (a status sent is read as
/// nothing: a create ignores it, as a real server does).
const JOB: &[Field] = &[
    one(1, "metadata", Ty::Msg(OBJECT_META)),
    one(2, "spec", Ty::Msg(JOB_SPEC)),
];

/// The object of a protobuf body, as JSON, when its `TypeMeta` names a
/// kind this server reads from protobuf.
///
/// # Errors
/// A message for a body that is not Kubernetes' protobuf, of a kind this
/// server does not read from it, or with a field it does not model.
pub(crate) fn object_from(bytes: &[u8]) -> Result<Value, String> {
    let unknown = bytes
        .strip_prefix(b"k8s\0")
        .ok_or("the body does not start with Kubernetes' protobuf magic")?;
    let type_meta = field(unknown, 1).ok_or("the body has no TypeMeta")?;
    let text = |n| {
        field(type_meta, n)
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .unwrap_or_default()
    };
    let (api_version, kind) = (text(1), text(2));
    let raw = field(unknown, 2).unwrap_or_default();
    let schema = match (api_version.as_str(), kind.as_str()) {
        ("batch/v1", "Job") => JOB,
        _ => {
            return Err(format!(
            "the test cluster reads {api_version} {kind} only as JSON; send it as application/json"
        ))
        }
    };
    let mut object = message(raw, schema, &kind)?;
    if let Value::Object(map) = &mut object {
        map.insert("apiVersion".into(), api_version.into());
        map.insert("kind".into(), kind.into());
    }
    Ok(object)
}

/// The message `bytes` read by `schema`, as a JSON object; `path` names
/// it in a refusal.
fn message(bytes: &[u8], schema: &[Field], path: &str) -> Result<Value, String> {
    let mut out = Map::new();
    for (number, value) in fields(bytes).ok_or_else(|| format!("{path} is not protobuf"))? {
        let Some(&Field(_, name, ty, repeated)) = schema.iter().find(|f| f.0 == number) else {
            if is_empty(&value) {
                continue;
            }
            return Err(format!(
                "{path}: the test cluster does not model protobuf field {number}; send the object as JSON"
            ));
        };
        let at = format!("{path}.{name}");
        let read = match (ty, value) {
            (Ty::Str, Raw::Bytes(b)) => Value::from(String::from_utf8_lossy(b).into_owned()),
            (Ty::Int, Raw::Varint(v)) => Value::from(v),
            (Ty::Bool, Raw::Varint(v)) => Value::from(v != 0),
            (Ty::Msg(inner), Raw::Bytes(b)) => message(b, inner, &at)?,
            (Ty::StrMap | Ty::QuantityMap, Raw::Bytes(b)) => {
                let key = field(b, 1).map(|k| String::from_utf8_lossy(k).into_owned());
                let value = field(b, 2).unwrap_or_default();
                let value = match ty {
                    Ty::QuantityMap => field(value, 1).unwrap_or_default(),
                    _ => value,
                };
                let entry = out
                    .entry(name)
                    .or_insert_with(|| json!({}))
                    .as_object_mut()
                    .ok_or_else(|| format!("{at} is not a map"))?;
                entry.insert(
                    key.unwrap_or_default(),
                    String::from_utf8_lossy(value).into_owned().into(),
                );
                continue;
            }
            _ => return Err(format!("{at} has the wrong wire type")),
        };
        if repeated {
            if let Some(list) = out.entry(name).or_insert_with(|| json!([])).as_array_mut() {
                list.push(read);
            }
        } else {
            out.insert(name.into(), read);
        }
    }
    Ok(Value::Object(out))
}

/// A field's value as the wire has it.
enum Raw<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

/// Whether a value the schema does not know holds nothing: zero, empty,
/// or a message of such values (gogo-protobuf writes them all).
fn is_empty(value: &Raw) -> bool {
    match value {
        Raw::Varint(v) => *v == 0,
        Raw::Bytes(b) => {
            b.is_empty() || fields(b).is_some_and(|inner| inner.iter().all(|(_, v)| is_empty(v)))
        }
        Raw::Fixed => false,
    }
}

/// Every field of a message, in order; `None` when it is not protobuf.
fn fields(mut msg: &[u8]) -> Option<Vec<(u64, Raw<'_>)>> {
    let mut out = Vec::new();
    while !msg.is_empty() {
        let key = varint(&mut msg)?;
        let value = match key & 7 {
            0 => Raw::Varint(varint(&mut msg)?),
            2 => {
                let len = usize::try_from(varint(&mut msg)?).ok()?;
                let (value, rest) = (msg.get(..len)?, msg.get(len..)?);
                msg = rest;
                Raw::Bytes(value)
            }
            5 => {
                msg = msg.get(4..)?;
                Raw::Fixed
            }
            1 => {
                msg = msg.get(8..)?;
                Raw::Fixed
            }
            _ => return None,
        };
        out.push((key >> 3, value));
    }
    Some(out)
}

fn varint(buf: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = buf.split_first()?;
        *buf = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

/// The first length-delimited field `number` of a protobuf message.
pub(crate) fn field(msg: &[u8], number: u64) -> Option<&[u8]> {
    fields(msg)?.into_iter().find_map(|(n, v)| match v {
        Raw::Bytes(b) if n == number => Some(b),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What kubectl v1.32 sends for `kubectl create job j3
    /// --image=knotless-busybox:local -- echo hi`, byte for byte.
    const KUBECTL_CREATE_JOB: &[u8] = b"k8s\0\x0a\x0f\x0a\x08batch/v1\x12\x03Job\x12\x93\x01\
\x0a\x12\x0a\x02j3\x12\x00\x1a\x00\x22\x00\x2a\x00\x32\x00\x38\x00\x42\x00\
\x12\x73\x32\x71\x0a\x10\x0a\x00\x12\x00\x1a\x00\x22\x00\x2a\x00\x32\x00\x38\x00\x42\x00\
\x12\x5d\x12\x3a\x0a\x02j3\x12\x16knotless-busybox:local\x1a\x04echo\x1a\x02hi\x2a\x00\x42\x00\
\x6a\x00\x72\x00\x80\x01\x00\x88\x01\x00\x90\x01\x00\xa2\x01\x00\
\x1a\x05Never\x32\x00\x42\x00\x4a\x00\x52\x00\x58\x00\x60\x00\x68\x00\x82\x01\x00\x8a\x01\x00\x9a\x01\x00\xc2\x01\x00\
\x1a\x08\x20\x00\x28\x00\x30\x00\x3a\x00\x1a\x00\x22\x00";

    #[test]
    fn kubectls_create_job_reads_as_the_json_it_stands_for() {
        let job = object_from(KUBECTL_CREATE_JOB).unwrap();
        assert_eq!(job["kind"], "Job");
        assert_eq!(job["apiVersion"], "batch/v1");
        assert_eq!(job["metadata"]["name"], "j3");
        let pod = &job["spec"]["template"]["spec"];
        assert_eq!(pod["restartPolicy"], "Never");
        let container = &pod["containers"][0];
        assert_eq!(container["name"], "j3");
        assert_eq!(container["image"], "knotless-busybox:local");
        assert_eq!(container["command"], json!(["echo", "hi"]));
    }

    #[test]
    fn a_field_the_model_lacks_is_refused_by_number_not_dropped() {
        // PodSpec field 1, volumes, holding one volume named "v".
        let mut pod_spec = vec![0x0a, 0x03, 0x0a, 0x01, b'v'];
        pod_spec.extend_from_slice(b"\x1a\x05Never");
        let template = [&[0x12, pod_spec.len() as u8][..], &pod_spec].concat();
        let spec = [&[0x32, template.len() as u8][..], &template].concat();
        let job = [&b"\x0a\x03\x0a\x01j"[..], &[0x12, spec.len() as u8], &spec].concat();
        let body = [
            &b"k8s\0\x0a\x0f\x0a\x08batch/v1\x12\x03Job\x12"[..],
            &[job.len() as u8],
            &job,
        ]
        .concat();
        let err = object_from(&body).unwrap_err();
        assert!(
            err.contains("Job.spec.template.spec") && err.contains("field 1"),
            "{err}"
        );
        let other = object_from(b"k8s\0\x0a\x0b\x0a\x02v1\x12\x05Other").unwrap_err();
        assert!(other.contains("only as JSON"), "{other}");
    }
}
