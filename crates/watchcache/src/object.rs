//! Cached objects: serialized bytes with the resourceVersion set, plus selector fields.

use bytes::Bytes;
use serde_json::Value;
use shardplane_apimachinery::meta::set_resource_version;
use shardplane_apimachinery::resources::ResourceInfo;
use shardplane_apimachinery::selectors::field_value;
use std::sync::Arc;

/// One object as the cache holds it. Cheap to share (`Arc`), never re-serialized.
#[derive(Debug, PartialEq, Eq)]
pub struct CachedObject {
    /// `namespace\0name`: sorts like (namespace, name).
    pub key: Box<str>,
    /// JSON with `metadata.resourceVersion` set.
    pub bytes: Bytes,
    /// The object's resourceVersion (its etcd mod_revision; for a deleted object, the deletion).
    pub rv: u64,
    /// `metadata.uid`.
    pub uid: Box<str>,
    /// `metadata.labels`, sorted by key.
    pub labels: Box<[(Box<str>, Box<str>)]>,
    /// The resource's selectable fields, with `metadata.name` and `metadata.namespace` first.
    pub fields: Box<[(&'static str, Box<str>)]>,
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
        self.labels.binary_search_by(|(lk, _)| (**lk).cmp(k)).ok().map(|i| &*self.labels[i].1)
    }

    /// A selectable field's value ("" if absent).
    pub fn field(&self, f: &str) -> &str {
        self.fields.iter().find(|(k, _)| *k == f).map_or("", |(_, v)| v)
    }
}

/// The cache key of (namespace, name).
pub fn cache_key(namespace: &str, name: &str) -> Box<str> {
    format!("{namespace}\0{name}").into_boxed_str()
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
    let mut labels: Vec<(Box<str>, Box<str>)> = meta
        .get("labels")
        .and_then(Value::as_object)
        .map(|m| m.iter().filter_map(|(k, v)| Some((k.as_str().into(), v.as_str()?.into()))).collect())
        .unwrap_or_default();
    labels.sort();
    let mut fields: Vec<(&'static str, Box<str>)> = vec![("metadata.name", name.into()), ("metadata.namespace", namespace.into())];
    fields.extend(info.selectable_fields.iter().map(|f| (*f, field_value(v, f).into_boxed_str())));
    let key = cache_key(namespace, name);
    let uid = uid.into();
    let bytes = Bytes::from(shardplane_apimachinery::encode::object_bytes(&v));
    Ok(CachedObject { key, bytes, rv, uid, labels: labels.into(), fields: fields.into() })
}
