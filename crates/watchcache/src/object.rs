//! Cached objects: serialized bytes with the resourceVersion set, plus selector fields.

use bytes::Bytes;
use serde_json::Value;
use shardplane_apimachinery::meta::set_resource_version;
use shardplane_apimachinery::resources::ResourceInfo;
use shardplane_apimachinery::selectors::field_value;
use std::sync::Arc;

/// One object as the cache holds it. Cheap to share (`Arc`), never re-serialized.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CachedObject {
    /// `namespace\0name`: sorts like (namespace, name).
    pub key: Box<str>,
    /// JSON with `metadata.resourceVersion` set.
    pub bytes: Bytes,
    /// The object's resourceVersion (its etcd mod_revision; for a deleted object, the deletion).
    pub rv: u64,
    /// `metadata.uid`.
    pub uid: Box<str>,
    /// Labels and selectable field values, packed.
    attrs: Attrs,
    /// The names of the resource's selectable fields (beyond name and namespace), in the order
    /// `attrs` holds their values.
    field_names: std::sync::Arc<[String]>,
}

/// `metadata.labels` (sorted by key) and selectable field values in one allocation, instead of
/// two per label and one per field: a cached object's selector data costs one small buffer.
/// Layout: label count, then each label key and value, then each field value; every count and
/// length a u32 (little-endian) before its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Attrs(Box<[u8]>);

impl Attrs {
    fn new(labels: &[(&str, &str)], fields: &[String]) -> Self {
        let size = 4 + labels.iter().map(|(k, v)| 8 + k.len() + v.len()).sum::<usize>() + fields.iter().map(|f| 4 + f.len()).sum::<usize>();
        let mut out = Vec::with_capacity(size);
        out.extend_from_slice(&(labels.len() as u32).to_le_bytes());
        for s in labels.iter().flat_map(|(k, v)| [*k, *v]).chain(fields.iter().map(String::as_str)) {
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        Self(out.into_boxed_slice())
    }

    /// Every string in order (label keys and values alternating, then field values).
    fn strings(&self) -> impl Iterator<Item = &str> {
        let mut at = 4;
        std::iter::from_fn(move || {
            let len = u32::from_le_bytes(self.0.get(at..at + 4)?.try_into().ok()?) as usize;
            let s = self.0.get(at + 4..at + 4 + len)?;
            at += 4 + len;
            // Written from &str by `new`.
            Some(std::str::from_utf8(s).unwrap_or(""))
        })
    }

    fn label_count(&self) -> usize {
        u32::from_le_bytes(self.0[..4].try_into().expect("count")) as usize
    }
}

impl CachedObject {
    /// The object's namespace ("" for cluster-scoped).
    pub fn namespace(&self) -> &str {
        self.key.split_once('\0').map_or("", |(ns, _)| ns)
    }

    /// The object's name.
    pub fn name(&self) -> &str {
        self.key.split_once('\0').map_or(&*self.key, |(_, n)| n)
    }

    /// A label's value.
    pub fn label(&self, k: &str) -> Option<&str> {
        let mut s = self.attrs.strings().take(2 * self.attrs.label_count());
        while let (Some(key), Some(value)) = (s.next(), s.next()) {
            if key == k {
                return Some(value);
            }
        }
        None
    }

    /// A selectable field's value ("" if absent).
    pub fn field(&self, f: &str) -> &str {
        match f {
            "metadata.name" => self.name(),
            "metadata.namespace" => self.namespace(),
            _ => match self.field_names.iter().position(|n| *n == f) {
                Some(i) => self.attrs.strings().nth(2 * self.attrs.label_count() + i).unwrap_or(""),
                None => "",
            },
        }
    }
}

/// The cache key of (namespace, name).
pub fn cache_key(namespace: &str, name: &str) -> Box<str> {
    format!("{namespace}\0{name}").into_boxed_str()
}

/// The (namespace, name) of a cache key; a key without a namespace part is a cluster-scoped name.
pub fn split_cache_key(key: &str) -> (&str, &str) {
    key.split_once('\0').unwrap_or(("", key))
}

/// Turns stored bytes into cached objects for one resource.
#[derive(Clone)]
pub struct ObjectCodec {
    info: Arc<ResourceInfo>,
}

impl ObjectCodec {
    /// A codec for `info`'s objects.
    pub fn new(info: Arc<ResourceInfo>) -> Self {
        Self { info }
    }

    /// The resource.
    pub fn info(&self) -> &ResourceInfo {
        &self.info
    }

    /// Decodes stored bytes, stamps `rv` as resourceVersion and extracts selector fields.
    pub fn decode(&self, stored: &[u8], rv: u64) -> Result<CachedObject, String> {
        let mut v: Value = serde_json::from_slice(stored).map_err(|e| format!("stored object is not JSON: {e}"))?;
        // A custom resource's schema defaults apply on reading from storage, as upstream.
        shardplane_apimachinery::structural::default_custom(&self.info, &mut v);
        decode_object(&self.info, &mut v, rv)
    }
}

/// Builds a [`CachedObject`] from a decoded object (consumed: it is serialized once).
pub fn decode_object(info: &ResourceInfo, v: &mut Value, rv: u64) -> Result<CachedObject, String> {
    set_resource_version(v, rv);
    let meta = v.get("metadata").ok_or("object has no metadata")?;
    let name = meta.get("name").and_then(Value::as_str).ok_or("object has no name")?;
    let namespace = meta.get("namespace").and_then(Value::as_str).unwrap_or("");
    let uid = meta.get("uid").and_then(Value::as_str).unwrap_or("");
    let mut labels: Vec<(&str, &str)> = meta.get("labels").and_then(Value::as_object).map(|m| m.iter().filter_map(|(k, v)| Some((k.as_str(), v.as_str()?))).collect()).unwrap_or_default();
    labels.sort();
    let fields: Vec<String> = info.selectable_fields.iter().map(|f| field_value(v, f)).collect();
    let attrs = Attrs::new(&labels, &fields);
    let key = cache_key(namespace, name);
    let uid = uid.into();
    // The encoder grows its buffer by doubling: without the shrink, a cached object would keep
    // up to twice its size (Bytes keeps a Vec's capacity).
    let mut encoded = shardplane_apimachinery::encode::object_bytes(v);
    encoded.shrink_to_fit();
    let bytes = Bytes::from(encoded);
    Ok(CachedObject { key, bytes, rv, uid, attrs, field_names: info.selectable_fields.clone() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use shardplane_apimachinery::resources::{builtin_resources, find};
    use std::collections::BTreeMap;

    fn decoded(group: &str, plural: &str, v: Value) -> CachedObject {
        let all = builtin_resources();
        let info = find(&all, group, "v1", plural).expect("served");
        decode_object(info, &mut v.clone(), 7).expect("decodes")
    }

    #[test]
    fn fields_and_labels_read_back() {
        let pod = decoded("", "pods", serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "n", "labels": {"b": "2", "a": "1"}}, "spec": {"nodeName": "node-1", "restartPolicy": "Never"}, "status": {"phase": "Running"}}));
        assert_eq!((pod.label("a"), pod.label("b"), pod.label("c")), (Some("1"), Some("2"), None));
        assert_eq!((pod.field("metadata.name"), pod.field("metadata.namespace")), ("p", "n"));
        assert_eq!((pod.field("spec.nodeName"), pod.field("spec.restartPolicy"), pod.field("status.phase")), ("node-1", "Never", "Running"));
        assert_eq!(pod.field("spec.unknown"), "");
        let cm = decoded("", "configmaps", serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}));
        assert_eq!((cm.label("a"), cm.field("metadata.namespace"), cm.field("metadata.name")), (None, "", "c"));
    }

    proptest! {
        /// Packed labels answer like the map they came from.
        #[test]
        fn packed_labels_match_a_map(labels in proptest::collection::btree_map("[a-z./-]{0,12}", "[a-zA-Z0-9._-]{0,12}", 0..8), probe in "[a-z./-]{0,12}") {
            let obj = decoded("", "configmaps", serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "n", "labels": labels}}));
            let model: BTreeMap<String, String> = labels.clone();
            for (k, v) in &model {
                prop_assert_eq!(obj.label(k), Some(v.as_str()));
            }
            prop_assert_eq!(obj.label(&probe), model.get(&probe).map(String::as_str));
        }
    }
}
