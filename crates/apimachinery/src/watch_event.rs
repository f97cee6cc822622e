//! Watch event lines, shared by shards and routers so both frame events and bookmarks alike.

use crate::resources::ResourceInfo;
use base64::Engine;
use bytes::Bytes;
use serde_json::{json, Value};

/// `{"type":KIND,"object":OBJECT}\n` around already-serialized object bytes.
pub fn line(kind: &str, object: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(object.len() + 32);
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\",\"object\":");
    out.extend_from_slice(object);
    out.extend_from_slice(b"}\n");
    Bytes::from(out)
}

/// A BOOKMARK at `rv`; `initial_end` marks the end of `sendInitialEvents` with
/// `k8s.io/initial-events-end` and the list blueprint client-go 0.32–0.33 look for.
pub fn bookmark(info: &ResourceInfo, rv: u64, initial_end: bool) -> Bytes {
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        let blueprint = json!({"kind": info.list_kind, "apiVersion": info.api_version(), "metadata": {}, "items": Value::Null});
        let b64 = base64::engine::general_purpose::STANDARD.encode(crate::encode::object_bytes(&blueprint));
        meta["annotations"] = json!({"k8s.io/initial-events-end": "true", "kubernetes.io/initial-events-list-blueprint": b64});
    }
    let obj = json!({"kind": info.kind, "apiVersion": info.api_version(), "metadata": meta});
    line("BOOKMARK", &crate::encode::object_bytes(&obj))
}
