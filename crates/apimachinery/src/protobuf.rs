//! Protobuf request bodies (`application/vnd.kubernetes.protobuf`), as client-go's typed clients
//! and kubectl's generators send them: the magic `k8s\0`, then a `runtime.Unknown` whose
//! `typeMeta` names the kind and whose `raw` holds the kind's message.
//!
//! Decoding is driven by descriptors compiled from upstream's `generated.proto` files
//! (`proto/kubernetes.fds`, made by `deploy/local/gen-proto-descriptors.sh`), so every kind of a
//! served group decodes with no per-kind code. The result is the object's Kubernetes JSON:
//! field names are the proto names (upstream names proto fields after their JSON tags), and the
//! apimachinery types with their own JSON form are mapped by hand: `Time`/`MicroTime` (RFC 3339),
//! `Quantity` and `IntOrString` (string or number), `RawExtension`/`FieldsV1` (embedded JSON),
//! `Duration`, and `bytes` (base64).

use crate::status::ApiError;
use base64::Engine;
use prost_reflect::{DescriptorPool, DynamicMessage, MapKey, MessageDescriptor, ReflectMessage, Value as PValue};
use serde_json::{Map, Value};
use std::sync::LazyLock;

/// The 4-byte prefix of every Kubernetes protobuf body.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// The media type.
pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

static POOL: LazyLock<DescriptorPool> =
    LazyLock::new(|| DescriptorPool::decode(include_bytes!("../proto/kubernetes.fds").as_slice()).expect("bundled Kubernetes descriptors decode"));

/// `message.field` of the non-pointer scalar fields tagged `omitempty` in the Go types: Go's
/// protobuf marshaller writes their zero values, its JSON encoder drops them, and so do we.
static OMITEMPTY_SCALARS: LazyLock<std::collections::HashSet<&'static str>> =
    LazyLock::new(|| include_str!("../proto/omitempty-scalars.txt").lines().filter(|l| !l.starts_with('#') && !l.is_empty()).collect());

fn is_zero_scalar(v: &PValue) -> bool {
    match v {
        PValue::Bool(b) => !b,
        PValue::I32(n) => *n == 0,
        PValue::I64(n) => *n == 0,
        PValue::U32(n) => *n == 0,
        PValue::U64(n) => *n == 0,
        PValue::F32(f) => *f == 0.0,
        PValue::F64(f) => *f == 0.0,
        PValue::String(s) => s.is_empty(),
        PValue::Bytes(b) => b.is_empty(),
        _ => false,
    }
}

const META: &str = "k8s.io.apimachinery.pkg.apis.meta.v1";
/// Go's zero `time.Time` in Unix seconds: JSON `null`.
const GO_ZERO_TIME: i64 = -62_135_596_800;

fn bad(msg: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(format!("unable to decode protobuf body: {msg}"))
}

/// The message for `apiVersion`/`kind` of a served group (`apps/v1` → `k8s.io.api.apps.v1`).
fn message_for(api_version: &str, kind: &str) -> Option<MessageDescriptor> {
    if matches!(kind, "DeleteOptions" | "ListOptions" | "Status") {
        return POOL.get_message_by_name(&format!("{META}.{kind}"));
    }
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let package = match group.split('.').next().unwrap_or("") {
        "" => "core",
        g => g,
    };
    POOL.get_message_by_name(&format!("k8s.io.api.{package}.{version}.{kind}"))
}

/// Decodes a protobuf body into the object's JSON, with `apiVersion` and `kind` from its envelope.
pub fn decode(body: &[u8]) -> Result<Value, ApiError> {
    let rest = body.strip_prefix(MAGIC.as_slice()).ok_or_else(|| bad("missing the k8s\\0 prefix"))?;
    let unknown_desc = POOL.get_message_by_name("k8s.io.apimachinery.pkg.runtime.Unknown").expect("runtime.Unknown");
    let unknown = DynamicMessage::decode(unknown_desc, rest).map_err(bad)?;
    let type_meta = unknown.get_field_by_name("typeMeta");
    let tm = type_meta.as_ref().and_then(|v| v.as_message());
    let field = |name: &str| tm.and_then(|m| m.get_field_by_name(name)).and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
    let (api_version, kind) = (field("apiVersion"), field("kind"));
    let encoding = unknown.get_field_by_name("contentEncoding").and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
    if !encoding.is_empty() {
        return Err(bad(format!("unsupported content encoding {encoding:?}")));
    }
    let desc = message_for(&api_version, &kind).ok_or_else(|| bad(format!("no kind {kind:?} is registered for version {api_version:?}")))?;
    let raw = unknown.get_field_by_name("raw").and_then(|v| v.as_bytes().cloned()).unwrap_or_default();
    let msg = DynamicMessage::decode(desc, raw.as_ref()).map_err(bad)?;
    let mut obj = message_to_json(&msg);
    if let Some(o) = obj.as_object_mut() {
        // TypeMeta travels in the envelope; put it first as upstream's JSON does.
        let mut with_type = Map::new();
        with_type.insert("apiVersion".into(), Value::String(api_version));
        with_type.insert("kind".into(), Value::String(kind));
        with_type.extend(std::mem::take(o));
        *o = with_type;
    }
    Ok(obj)
}

fn int(msg: &DynamicMessage, name: &str) -> i64 {
    match msg.get_field_by_name(name).as_deref() {
        Some(PValue::I64(v)) => *v,
        Some(PValue::I32(v)) => i64::from(*v),
        _ => 0,
    }
}

fn time(msg: &DynamicMessage, micro: bool) -> Value {
    let (secs, nanos) = (int(msg, "seconds"), int(msg, "nanos"));
    // Go writes a zero time as an empty message (older clients: the zero time's seconds);
    // JSON renders it as null.
    if (secs == GO_ZERO_TIME || secs == 0) && nanos == 0 {
        return Value::Null;
    }
    match jiff::Timestamp::new(secs, nanos as i32) {
        Ok(t) if micro => Value::String(t.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string()),
        Ok(t) => Value::String(t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()),
        Err(_) => Value::Null,
    }
}

fn go_duration(nanos: i64) -> String {
    let d = std::time::Duration::from_nanos(nanos.unsigned_abs());
    let (h, m, s) = (d.as_secs() / 3600, d.as_secs() / 60 % 60, d.as_secs_f64() % 60.0);
    let sign = if nanos < 0 { "-" } else { "" };
    match (h, m) {
        (0, 0) => format!("{sign}{s}s"),
        (0, _) => format!("{sign}{m}m{s}s"),
        _ => format!("{sign}{h}h{m}m{s}s"),
    }
}

fn embedded_json(msg: &DynamicMessage, field: &str) -> Value {
    msg.get_field_by_name(field).and_then(|v| v.as_bytes().and_then(|b| serde_json::from_slice(b).ok())).unwrap_or(Value::Null)
}

/// One message as Kubernetes JSON.
fn message_to_json(msg: &DynamicMessage) -> Value {
    let name = msg.descriptor().full_name().to_owned();
    match name.as_str() {
        n if n == format!("{META}.Time") => time(msg, false),
        n if n == format!("{META}.MicroTime") => time(msg, true),
        n if n == format!("{META}.Duration") => Value::String(go_duration(int(msg, "duration"))),
        n if n == format!("{META}.FieldsV1") => embedded_json(msg, "Raw"),
        "k8s.io.apimachinery.pkg.runtime.RawExtension" => embedded_json(msg, "raw"),
        "k8s.io.apimachinery.pkg.api.resource.Quantity" => msg.get_field_by_name("string").and_then(|v| v.as_str().map(|s| Value::String(s.to_owned()))).unwrap_or(Value::Null),
        "k8s.io.apimachinery.pkg.util.intstr.IntOrString" => {
            if int(msg, "type") == 1 {
                msg.get_field_by_name("strVal").and_then(|v| v.as_str().map(|s| Value::String(s.to_owned()))).unwrap_or(Value::Null)
            } else {
                Value::from(int(msg, "intVal"))
            }
        }
        _ => {
            let mut out = Map::new();
            for (field, value) in msg.fields() {
                if is_zero_scalar(value) && OMITEMPTY_SCALARS.contains(field.full_name()) {
                    continue;
                }
                let v = value_to_json(value);
                // A zero Time stays as null, as upstream's JSON writes it; other nulls are absent.
                let is_time = field.kind().as_message().is_some_and(|m| m.full_name() == format!("{META}.Time"));
                if !v.is_null() || is_time {
                    out.insert(field.name().to_owned(), v);
                }
            }
            Value::Object(out)
        }
    }
}

fn value_to_json(v: &PValue) -> Value {
    match v {
        PValue::Bool(b) => Value::Bool(*b),
        PValue::I32(n) => Value::from(*n),
        PValue::I64(n) => Value::from(*n),
        PValue::U32(n) => Value::from(*n),
        PValue::U64(n) => Value::from(*n),
        PValue::F32(f) => serde_json::Number::from_f64(f64::from(*f)).map_or(Value::Null, Value::Number),
        PValue::F64(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
        PValue::String(s) => Value::String(s.clone()),
        PValue::Bytes(b) => Value::String(base64::engine::general_purpose::STANDARD.encode(b)),
        PValue::EnumNumber(n) => Value::from(*n),
        PValue::Message(m) => message_to_json(m),
        PValue::List(items) => Value::Array(items.iter().map(value_to_json).collect()),
        PValue::Map(m) => {
            let mut out: Vec<(String, Value)> = m
                .iter()
                .map(|(k, v)| {
                    let key = match k {
                        MapKey::String(s) => s.clone(),
                        MapKey::Bool(b) => b.to_string(),
                        MapKey::I32(n) => n.to_string(),
                        MapKey::I64(n) => n.to_string(),
                        MapKey::U32(n) => n.to_string(),
                        MapKey::U64(n) => n.to_string(),
                    };
                    (key, value_to_json(v))
                })
                .collect();
            out.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(out.into_iter().collect())
        }
    }
}

/// Encodes a JSON object as a protobuf body (the inverse of [`decode`]), for tests and tools.
/// Supports what tests need: strings, numbers, bools, nested messages, lists and string maps.
pub fn encode(obj: &Value) -> Result<Vec<u8>, String> {
    use prost::Message;
    let api_version = obj["apiVersion"].as_str().ok_or("apiVersion missing")?;
    let kind = obj["kind"].as_str().ok_or("kind missing")?;
    let desc = message_for(api_version, kind).ok_or_else(|| format!("unknown kind {kind}"))?;
    let msg = json_to_message(&desc, obj, false)?;
    let unknown_desc = POOL.get_message_by_name("k8s.io.apimachinery.pkg.runtime.Unknown").expect("runtime.Unknown");
    let mut unknown = DynamicMessage::new(unknown_desc.clone());
    let tm_desc = unknown_desc.get_field_by_name("typeMeta").and_then(|f| f.kind().as_message().cloned()).ok_or("typeMeta")?;
    let mut tm = DynamicMessage::new(tm_desc);
    tm.set_field_by_name("apiVersion", PValue::String(api_version.into()));
    tm.set_field_by_name("kind", PValue::String(kind.into()));
    unknown.set_field_by_name("typeMeta", PValue::Message(tm));
    unknown.set_field_by_name("raw", PValue::Bytes(msg.encode_to_vec().into()));
    let mut out = MAGIC.to_vec();
    out.extend(unknown.encode_to_vec());
    Ok(out)
}

/// Encodes a JSON object whose keys are the proto field names of message `full_name` (no
/// Kubernetes envelope): the protobuf `/openapi/v2` document is built this way.
pub fn encode_message(full_name: &str, v: &Value) -> Result<Vec<u8>, String> {
    use prost::Message;
    let desc = POOL.get_message_by_name(full_name).ok_or_else(|| format!("unknown message {full_name}"))?;
    Ok(json_to_message(&desc, v, true)?.encode_to_vec())
}

/// `strict`: a key that is no field of the message is an error (else it is skipped, as TypeMeta is).
fn json_to_message(desc: &MessageDescriptor, v: &Value, strict: bool) -> Result<DynamicMessage, String> {
    let mut msg = DynamicMessage::new(desc.clone());
    let Some(obj) = v.as_object() else { return Err(format!("{} must be an object", desc.full_name())) };
    for (k, val) in obj {
        let Some(field) = desc.get_field_by_name(k) else {
            if strict {
                return Err(format!("{} has no field {k}", desc.full_name()));
            }
            continue;
        };
        let pv = if field.is_map() {
            let entry = field.kind().as_message().cloned().ok_or("map entry")?;
            let value_field = entry.map_entry_value_field();
            let mut m = std::collections::HashMap::new();
            for (mk, mv) in val.as_object().ok_or("map must be an object")? {
                m.insert(MapKey::String(mk.clone()), scalar_or_message(&value_field.kind(), mv, strict)?);
            }
            PValue::Map(m)
        } else if field.is_list() {
            PValue::List(val.as_array().ok_or("list must be an array")?.iter().map(|x| scalar_or_message(&field.kind(), x, strict)).collect::<Result<_, _>>()?)
        } else {
            scalar_or_message(&field.kind(), val, strict)?
        };
        msg.set_field(&field, pv);
    }
    Ok(msg)
}

fn scalar_or_message(kind: &prost_reflect::Kind, v: &Value, strict: bool) -> Result<PValue, String> {
    use prost_reflect::Kind;
    Ok(match kind {
        Kind::String => PValue::String(v.as_str().ok_or("expected a string")?.to_owned()),
        Kind::Bool => PValue::Bool(v.as_bool().ok_or("expected a bool")?),
        Kind::Int32 => PValue::I32(v.as_i64().ok_or("expected an integer")? as i32),
        Kind::Int64 => PValue::I64(v.as_i64().ok_or("expected an integer")?),
        Kind::Double => PValue::F64(v.as_f64().ok_or("expected a number")?),
        Kind::Bytes => PValue::Bytes(base64::engine::general_purpose::STANDARD.decode(v.as_str().ok_or("expected base64")?).map_err(|e| e.to_string())?.into()),
        Kind::Message(m) if m.full_name() == "k8s.io.apimachinery.pkg.util.intstr.IntOrString" => {
            let mut msg = DynamicMessage::new(m.clone());
            match v {
                Value::String(s) => {
                    msg.set_field_by_name("type", PValue::I64(1));
                    msg.set_field_by_name("strVal", PValue::String(s.clone()));
                }
                other => {
                    msg.set_field_by_name("type", PValue::I64(0));
                    msg.set_field_by_name("intVal", PValue::I32(other.as_i64().ok_or("expected int or string")? as i32));
                }
            }
            PValue::Message(msg)
        }
        Kind::Message(m) if m.full_name() == "k8s.io.apimachinery.pkg.api.resource.Quantity" => {
            let mut msg = DynamicMessage::new(m.clone());
            msg.set_field_by_name("string", PValue::String(v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string())));
            PValue::Message(msg)
        }
        Kind::Message(m) => PValue::Message(json_to_message(m, v, strict)?),
        other => return Err(format!("unsupported field kind {other:?}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trips_kinds_with_special_types() {
        let objs = [
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "d", "labels": {"x": "y"}}, "data": {"k": "v"}}),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"k": "aGVsbG8="}, "type": "Opaque"}),
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": {"replicas": 2, "selector": {"matchLabels": {"a": "b"}},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
                "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "nginx", "resources": {"limits": {"cpu": "500m"}}, "ports": [{"containerPort": 80}]}]}}}}),
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"}, "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15}}),
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}),
            json!({"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background", "preconditions": {"uid": "u"}}),
        ];
        for obj in objs {
            let bytes = encode(&obj).unwrap();
            assert!(bytes.starts_with(MAGIC));
            assert_eq!(decode(&bytes).unwrap(), obj);
        }
    }

    #[test]
    fn zero_values_of_omitempty_value_fields_are_dropped() {
        // What Go writes for a ConfigMap: every non-pointer ObjectMeta string, zeros included.
        let mut obj = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "generateName": "", "namespace": "", "uid": "", "generation": 0}});
        let decoded = decode(&encode(&obj).unwrap()).unwrap();
        obj["metadata"] = json!({"name": "a"});
        assert_eq!(decoded, obj);
        // A pointer field keeps its zero (replicas: 0 means zero replicas).
        let d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {"replicas": 0, "paused": false}});
        assert_eq!(decode(&encode(&d).unwrap()).unwrap()["spec"], json!({"replicas": 0}));
    }

    #[test]
    fn times_and_errors() {
        let mut m = DynamicMessage::new(POOL.get_message_by_name(&format!("{META}.Time")).unwrap());
        m.set_field_by_name("seconds", PValue::I64(1_700_000_000));
        assert_eq!(message_to_json(&m), json!("2023-11-14T22:13:20Z"));
        m.set_field_by_name("seconds", PValue::I64(GO_ZERO_TIME));
        assert_eq!(message_to_json(&m), Value::Null);
        assert_eq!(decode(b"nope").unwrap_err().code, 400);
        assert_eq!(decode(b"k8s\0\xff\xff").unwrap_err().code, 400);
        let bogus = encode(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}})).unwrap();
        let mut bad_kind = bogus.clone();
        let pos = bad_kind.windows(9).position(|w| w == b"ConfigMap").unwrap();
        bad_kind[pos..pos + 9].copy_from_slice(b"ConfigMaq");
        assert_eq!(decode(&bad_kind).unwrap_err().code, 400);
    }
}
