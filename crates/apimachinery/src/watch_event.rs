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

/// The event type of a line of addressed events (RFC 0015).
pub const ADDRESSED: &str = "ADDRESSED";

/// One change for the watchers of several values of an indexed field, on one line, for a
/// router to hand out (RFC 0015): `{"type":"ADDRESSED","rv":RV,"events":[{"to":VALUE,
/// "event":EVENT}…]}\n`, each EVENT an event line as [`line`] frames it (its newline dropped).
pub fn addressed_line(rv: u64, events: &[(&str, Bytes)]) -> Bytes {
    let mut out = Vec::with_capacity(events.iter().map(|(to, e)| to.len() + e.len() + 24).sum::<usize>() + 48);
    out.extend_from_slice(format!("{{\"type\":\"{ADDRESSED}\",\"rv\":{rv},\"events\":[").as_bytes());
    for (i, (to, event)) in events.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"to\":");
        out.extend_from_slice(serde_json::to_string(to).expect("a string serializes").as_bytes());
        out.extend_from_slice(b",\"event\":");
        out.extend_from_slice(event.strip_suffix(b"\n").unwrap_or(event));
        out.push(b'}');
    }
    out.extend_from_slice(b"]}\n");
    Bytes::from(out)
}

#[derive(serde::Deserialize)]
struct AddressedLine<'a> {
    rv: u64,
    #[serde(borrow)]
    events: Vec<AddressedEvent<'a>>,
}

#[derive(serde::Deserialize)]
struct AddressedEvent<'a> {
    to: String,
    #[serde(borrow)]
    event: &'a serde_json::value::RawValue,
}

/// A line [`addressed_line`] made, taken apart: its revision and each value's event line (with
/// its newline). None for anything else.
pub fn parse_addressed(line: &[u8]) -> Option<(u64, Vec<(String, Bytes)>)> {
    let parsed: AddressedLine = serde_json::from_slice(line).ok()?;
    let events = parsed
        .events
        .into_iter()
        .map(|e| {
            let mut l = Vec::with_capacity(e.event.get().len() + 1);
            l.extend_from_slice(e.event.get().as_bytes());
            l.push(b'\n');
            (e.to, Bytes::from(l))
        })
        .collect();
    Some((parsed.rv, events))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addressed_events_come_apart_as_they_were_put_together() {
        let a = line("ADDED", br#"{"metadata":{"name":"p","resourceVersion":"7"}}"#);
        let d = line("DELETED", br#"{"metadata":{"name":"p","resourceVersion":"7"}}"#);
        let joined = addressed_line(7, &[("node \"1\"", d.clone()), ("", a.clone())]);
        assert!(joined.ends_with(b"\n") && !joined[..joined.len() - 1].contains(&b'\n'));
        assert_eq!(parse_addressed(&joined), Some((7, vec![("node \"1\"".to_owned(), d.clone()), (String::new(), a)])));
        assert_eq!(parse_addressed(&d), None);
        assert_eq!(parse_addressed(b"{\"type\":\"ADDRESSED\""), None);
    }
}
