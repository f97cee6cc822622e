//! Objects as kube-apiserver writes them: `kind`, `apiVersion` and `metadata` first, and
//! `metadata`'s fields in `ObjectMeta`'s order, as Go's encoder does for typed objects. Clients
//! that parse do not care; anything reading the bytes (error offsets, diffs of raw responses,
//! byte-for-byte comparisons) does. Other keys follow in name order (shardplane keeps objects as
//! untyped JSON, so it does not know each type's field order).

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::Value;

/// The keys written first, in order, at the top of an object.
const HEAD: [&str; 3] = ["kind", "apiVersion", "metadata"];
/// `ObjectMeta`'s fields in its Go declaration order.
const OBJECT_META: [&str; 15] = [
    "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations", "ownerReferences", "finalizers", "managedFields",
];

/// `ListMeta`'s fields in its Go declaration order.
const LIST_META: [&str; 4] = ["selfLink", "resourceVersion", "continue", "remainingItemCount"];

/// A list's `metadata` (ListMeta) in upstream's key order.
pub fn list_meta_bytes(meta: &Value) -> Vec<u8> {
    serde_json::to_vec(&Ordered { value: meta, first: &LIST_META, meta: false }).expect("a JSON value serializes")
}

/// The object's JSON bytes in upstream's key order (any other value as serde_json writes it).
pub fn object_bytes(obj: &Value) -> Vec<u8> {
    serde_json::to_vec(&Ordered { value: obj, first: &HEAD, meta: true }).expect("a JSON value serializes")
}

/// An encoded object as `api_version` serves it: the same bytes with its `apiVersion` value
/// replaced (borrowed when it already says `api_version`). A custom resource's versions have one
/// schema under conversion `None`, so this is the whole conversion; the field is found among the
/// first bytes, where [`object_bytes`] writes it.
pub fn in_version<'a>(bytes: &'a [u8], api_version: &str) -> std::borrow::Cow<'a, [u8]> {
    const KEY: &[u8] = b"\"apiVersion\":\"";
    let head = &bytes[..bytes.len().min(512)];
    let Some(at) = head.windows(KEY.len()).position(|w| w == KEY) else { return std::borrow::Cow::Borrowed(bytes) };
    let start = at + KEY.len();
    // An apiVersion is a group/version, which has no escapes; one that does is left as stored.
    let Some((value, _)) = plain_string(&bytes[start..]) else { return std::borrow::Cow::Borrowed(bytes) };
    let len = value.len();
    if value == api_version {
        return std::borrow::Cow::Borrowed(bytes);
    }
    let mut out = Vec::with_capacity(bytes.len() + api_version.len());
    out.extend_from_slice(&bytes[..start]);
    out.extend_from_slice(api_version.as_bytes());
    out.extend_from_slice(&bytes[start + len..]);
    std::borrow::Cow::Owned(out)
}

/// A JSON string's text without escapes, read from just after its opening quote, and the bytes
/// after its closing quote; None when it has an escape (the caller parses instead).
pub fn plain_string(b: &[u8]) -> Option<(&str, &[u8])> {
    let end = memchr::memchr2(b'"', b'\\', b)?;
    (b[end] == b'"').then_some(())?;
    Some((std::str::from_utf8(&b[..end]).ok()?, &b[end + 1..]))
}

/// (namespace, name) from the opening of an ObjectMeta as [`object_bytes`] writes it (Go's field
/// order): `{"name":…`, maybe `"generateName"`, then `"namespace"` unless the object has none.
/// None when the bytes are laid out otherwise, or a string has an escape: the caller parses.
pub fn ordered_meta_key(m: &[u8]) -> Option<(String, String)> {
    let (name, mut rest) = plain_string(m.strip_prefix(b"{\"name\":\"")?)?;
    if let Some(r) = rest.strip_prefix(b",\"generateName\":\"") {
        rest = plain_string(r)?.1;
    }
    if let Some(r) = rest.strip_prefix(b",\"namespace\":\"") {
        return Some((plain_string(r)?.0.to_owned(), name.to_owned()));
    }
    // No namespace next: certain only if none follows anywhere (else a field out of Go's order
    // might be it, and the parse decides).
    memchr::memmem::find(rest, b"\"namespace\":").is_none().then(|| (String::new(), name.to_owned()))
}

/// A map written with `first` keys (those present) in order, then the rest in name order;
/// `meta` (an object's top level) orders `metadata`'s keys as ObjectMeta and each of `items`
/// as an object.
struct Ordered<'a> {
    value: &'a Value,
    first: &'a [&'a str],
    meta: bool,
}

impl Serialize for Ordered<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let Value::Object(map) = self.value else { return self.value.serialize(s) };
        let mut out = s.serialize_map(Some(map.len()))?;
        for k in self.first {
            if let Some(v) = map.get(*k) {
                entry(&mut out, k, v, self.meta)?;
            }
        }
        for (k, v) in map.iter().filter(|(k, _)| !self.first.contains(&k.as_str())) {
            entry(&mut out, k, v, self.meta)?;
        }
        out.end()
    }
}

fn entry<M: SerializeMap>(out: &mut M, k: &str, v: &Value, top: bool) -> Result<(), M::Error> {
    match (k, v) {
        ("metadata", _) if top => out.serialize_entry(k, &Ordered { value: v, first: &OBJECT_META, meta: false }),
        // A list's items are objects too.
        ("items", Value::Array(items)) if top => out.serialize_entry(k, &Items(items)),
        _ => out.serialize_entry(k, v),
    }
}

struct Items<'a>(&'a [Value]);

impl Serialize for Items<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|value| Ordered { value, first: &HEAD, meta: true }))
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn an_object_is_served_in_the_asked_version() {
        let stored = object_bytes(&serde_json::json!({"kind": "Session", "apiVersion": "a.example.com/v1", "metadata": {"name": "s"}, "spec": {"apiVersion": "inner/v9"}}));
        let served = in_version(&stored, "a.example.com/v1beta1");
        let v: Value = serde_json::from_slice(&served).unwrap();
        assert_eq!((v["apiVersion"].as_str(), v["spec"]["apiVersion"].as_str()), (Some("a.example.com/v1beta1"), Some("inner/v9")));
        assert!(matches!(in_version(&stored, "a.example.com/v1"), std::borrow::Cow::Borrowed(_)));
    }

    use super::*;
    use serde_json::json;

    /// The top-level keys of a JSON object, in the order they are written.
    fn key_order(bytes: &[u8]) -> Vec<String> {
        let mut keys = Vec::new();
        let mut de = serde_json::Deserializer::from_slice(bytes);
        let _ = serde::Deserializer::deserialize_map(&mut de, KeyCollector(&mut keys));
        keys
    }

    struct KeyCollector<'a>(&'a mut Vec<String>);

    impl<'de> serde::de::Visitor<'de> for KeyCollector<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(k) = map.next_key::<String>()? {
                map.next_value::<serde::de::IgnoredAny>()?;
                self.0.push(k);
            }
            Ok(())
        }
    }

    #[test]
    fn type_and_object_meta_come_first_as_upstream_writes_them() {
        let obj = json!({"apiVersion": "v1", "data": {"b": "1", "a": "2"}, "kind": "ConfigMap",
            "metadata": {"labels": {"x": "y"}, "name": "c", "creationTimestamp": "2026-01-01T00:00:00Z", "namespace": "d", "uid": "u", "resourceVersion": "5", "zz": 1}});
        let bytes = object_bytes(&obj);
        assert_eq!(key_order(&bytes), ["kind", "apiVersion", "metadata", "data"]);
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(text.starts_with(r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"c","namespace":"d","uid":"u","resourceVersion":"5","creationTimestamp":"2026-01-01T00:00:00Z","labels":{"x":"y"},"zz":1}"#), "{text}");
        // Same value, only the order differs.
        assert_eq!(serde_json::from_slice::<Value>(&bytes).unwrap(), obj);
    }

    #[test]
    fn list_items_are_ordered_as_objects() {
        let list = json!({"apiVersion": "v1", "items": [{"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": "a", "name": "b"}}], "kind": "PodList", "metadata": {"resourceVersion": "3"}});
        let text = String::from_utf8(object_bytes(&list)).unwrap();
        assert_eq!(text, r#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"3"},"items":[{"kind":"Pod","apiVersion":"v1","metadata":{"name":"b","namespace":"a"}}]}"#);
    }

    #[test]
    fn list_meta_is_in_list_meta_order() {
        let meta = json!({"remainingItemCount": 4, "continue": "c", "resourceVersion": "9"});
        assert_eq!(list_meta_bytes(&meta), br#"{"resourceVersion":"9","continue":"c","remainingItemCount":4}"#);
    }

    #[test]
    fn non_objects_are_written_as_is() {
        assert_eq!(object_bytes(&json!([1, "a"])), b"[1,\"a\"]");
        assert_eq!(object_bytes(&json!({"metadata": 3})), b"{\"metadata\":3}");
    }

    proptest::proptest! {
        /// The byte reader agrees with a parse of what the encoder wrote, or declines (never a
        /// wrong key): any names, generateName and namespace, escapes included.
        #[test]
        fn ordered_meta_key_reads_what_the_encoder_wrote(name in "[a-z0-9\\\\\"é.-]{0,12}", generate in proptest::option::of("[a-z\\\\\"-]{0,6}"), ns in proptest::option::of("[a-z0-9\\\\\"-]{0,8}"), label in "[a-z\\\\\"]{0,4}") {
            let mut meta = json!({"name": name, "labels": {"namespace": label}});
            if let Some(g) = &generate { meta["generateName"] = json!(g); }
            if let Some(n) = &ns { meta["namespace"] = json!(n); }
            let bytes = object_bytes(&json!({"kind": "ConfigMap", "apiVersion": "v1", "metadata": meta}));
            let at = bytes.windows(11).position(|w| w == b"\"metadata\":").unwrap() + 11;
            if let Some(key) = ordered_meta_key(&bytes[at..]) {
                proptest::prop_assert_eq!(key, (ns.clone().unwrap_or_default(), name.clone()));
            } else {
                // It may decline only for an escape, or for a namespace-less object whose later
                // fields hold a `"namespace":` key (here a label's).
                let escaped = |s: &str| s.contains(['\\', '"']);
                proptest::prop_assert!(escaped(&name) || generate.as_deref().is_some_and(escaped) || ns.as_deref().is_none_or(escaped));
            }
        }
    }
}
