//! An unpaged merged LIST, streamed: the shards' bodies are split into entries as they arrive
//! and merged by key into the client's body as it is sent, so the router never holds a whole
//! list and its answer starts while the shards are still writing theirs (RFC 0003, LIST step
//! 6; the measurements are in RFC 0005).
//!
//! A page with `limit` is small and goes through [`crate::list::merged_page`] instead, which
//! needs the whole page first to compute `continue` and `remainingItemCount` (written before
//! the items).
//!
//! The splitter is hand-written rather than a streaming JSON parser: it only finds the end of
//! each entry (brace depth outside strings), which is all the merge needs, at memchr-like speed,
//! and never decodes an object, as nothing else in the router does.

use crate::forward::passthrough;
use crate::state::RouterState;
use crate::list::entry_key_of;
use axum::body::Body;
use axum::http::{header, HeaderMap, Response, StatusCode};
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use serde_json::Value;
use shardplane_apimachinery::ApiError;

/// The head of a list body (everything before its entries) as found by [`EntrySplitter`].
#[derive(Debug, PartialEq)]
pub struct Head {
    /// The list without its entries, as JSON (`{"kind":…,"metadata":…,"items":[]}`).
    pub list: Value,
    /// Whether the entries are a Table's `rows` (else `items`).
    pub rows: bool,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum State {
    Head,
    /// Between entries (expecting `{`, `,` or `]`).
    Between,
    /// Inside an entry: brace depth, in a string, after a backslash.
    Entry { depth: u32, string: bool, escape: bool },
    Done,
}

/// Splits a list body, fed in chunks, into its head and its entries (each a complete JSON
/// object's bytes).
pub struct EntrySplitter {
    buf: BytesMut,
    /// Bytes of `buf` already scanned.
    scanned: usize,
    /// Where the current entry starts in `buf`.
    start: usize,
    state: State,
    head: Option<Head>,
    /// The body is line-framed ([`LIST_FRAMING_HEADER`](shardplane_http::protocol::LIST_FRAMING_HEADER)):
    /// one entry per line.
    lines: bool,
}

impl Default for EntrySplitter {
    fn default() -> Self {
        Self::new()
    }
}

impl EntrySplitter {
    pub fn new() -> Self {
        Self { buf: BytesMut::new(), scanned: 0, start: 0, state: State::Head, head: None, lines: false }
    }

    /// Adds bytes; returns the entries they completed.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<Bytes>, String> {
        self.buf.extend_from_slice(chunk);
        let mut out = Vec::new();
        if self.state == State::Head {
            let Some(head) = read_head(&self.buf) else { return Ok(out) };
            let (head, at) = head?;
            // A shard asked for line framing starts every entry on a line of its own.
            let Some(&first) = self.buf.get(at) else { return Ok(out) };
            self.lines = first == b'\n';
            self.head = Some(head);
            let _ = self.buf.split_to(at);
            self.scanned = 0;
            self.state = State::Between;
        }
        if self.lines {
            return self.split_lines(out);
        }
        let mut i = self.scanned;
        // Each step jumps with memchr to the next byte that matters: in a string a quote or a
        // backslash, outside one a quote or a brace. Brackets need no count: in well-formed
        // JSON the brace that closes an entry comes after every bracket inside it is closed.
        while i < self.buf.len() {
            match &mut self.state {
                State::Between => match self.buf[i] {
                    b'{' => {
                        self.start = i;
                        self.state = State::Entry { depth: 1, string: false, escape: false };
                    }
                    b']' => {
                        self.state = State::Done;
                        break;
                    }
                    b',' | b' ' | b'\n' | b'\r' | b'\t' => {}
                    other => return Err(format!("unexpected byte {:?} between list entries", other as char)),
                },
                State::Entry { escape, .. } if *escape => *escape = false,
                State::Entry { string: string @ true, escape, .. } => match memchr::memchr2(b'"', b'\\', &self.buf[i..]) {
                    None => {
                        i = self.buf.len();
                        break;
                    }
                    Some(skip) => {
                        i += skip;
                        if self.buf[i] == b'"' {
                            *string = false;
                        } else {
                            *escape = true;
                        }
                    }
                },
                State::Entry { depth, string, .. } => match memchr::memchr3(b'"', b'{', b'}', &self.buf[i..]) {
                    None => {
                        i = self.buf.len();
                        break;
                    }
                    Some(skip) => {
                        i += skip;
                        match self.buf[i] {
                            b'"' => *string = true,
                            b'{' => *depth += 1,
                            _ => {
                                *depth -= 1;
                                if *depth == 0 {
                                    let entry = self.buf.split_to(i + 1).split_off(self.start).freeze();
                                    out.push(entry);
                                    i = 0;
                                    self.start = 0;
                                    self.state = State::Between;
                                    continue;
                                }
                            }
                        }
                    }
                },
                State::Done => break,
                State::Head => unreachable!("the head is found above"),
            }
            i += 1;
        }
        self.scanned = i;
        if self.state == State::Between {
            // Nothing of value before the next entry.
            let _ = self.buf.split_to(self.scanned);
            self.scanned = 0;
        }
        Ok(out)
    }

    /// Splits a line-framed body: `[`, then each entry on a line of its own (followed by a comma
    /// but for the last), then `]}`. Compact JSON has no raw newline (one in a string is
    /// written `\n`), so one memchr per entry finds it.
    fn split_lines(&mut self, mut out: Vec<Bytes>) -> Result<Vec<Bytes>, String> {
        while self.state != State::Done {
            let Some(nl) = memchr::memchr(b'\n', &self.buf[self.scanned..]).map(|j| self.scanned + j) else {
                if self.buf.first() == Some(&b']') {
                    self.state = State::Done;
                } else {
                    self.scanned = self.buf.len();
                }
                break;
            };
            let mut line = self.buf.split_to(nl + 1);
            self.scanned = 0;
            line.truncate(nl);
            if line.last() == Some(&b',') {
                line.truncate(line.len() - 1);
            }
            match (line.first(), line.last()) {
                (None, _) => {}
                (Some(b']'), _) => self.state = State::Done,
                (Some(b'{'), Some(b'}')) => out.push(line.freeze()),
                _ => return Err("a line of a line-framed list is not one entry".into()),
            }
        }
        Ok(out)
    }

    /// The head, once it has arrived.
    pub fn head(&self) -> Option<&Head> {
        self.head.as_ref()
    }

    /// The head, taken.
    pub fn into_head(self) -> Option<Head> {
        self.head
    }

    /// Whether the closing `]` of the entries has been seen.
    pub fn done(&self) -> bool {
        self.state == State::Done
    }
}

/// A list body's head, once its entries' opening (`"items":[` or `"rows":[`) has arrived, and
/// the offset just past that opening.
pub fn read_head(buf: &[u8]) -> Option<Result<(Head, usize), String>> {
    let (at, rows) = find_entries_start(buf)?;
    let (marker_len, field) = if rows { (8, "rows") } else { (9, "items") };
    let parsed = std::str::from_utf8(&buf[..at]).map_err(|e| e.to_string()).and_then(|head_text| serde_json::from_str::<Value>(&format!("{head_text}\"{field}\":[]}}")).map_err(|e| format!("unreadable list head: {e}")));
    Some(parsed.map(|list| (Head { list, rows }, at + marker_len)))
}

/// Where a list's entries start: the offset of `"items":[` or `"rows":[`, and whether it is
/// rows. In JSON a `"` inside a string is always escaped, so these bytes occur only as keys;
/// the head's other keys (kind, apiVersion, metadata, columnDefinitions) never use them.
fn find_entries_start(buf: &[u8]) -> Option<(usize, bool)> {
    let items = memchr::memmem::find(buf, b"\"items\":[");
    // A Table's rows come before anything its rows contain, so only the bytes before the
    // first `"items":[` (if any) are searched for them.
    match memchr::memmem::find(&buf[..items.unwrap_or(buf.len())], b"\"rows\":[") {
        Some(r) => Some((r, true)),
        None => items.map(|i| (i, false)),
    }
}

/// One shard's body as a stream of entries.
struct ShardEntries {
    body: futures::stream::BoxStream<'static, Result<Bytes, reqwest::Error>>,
    splitter: EntrySplitter,
    ready: std::collections::VecDeque<Bytes>,
    url: String,
}

impl ShardEntries {
    /// Reads until the head has arrived.
    async fn head(&mut self) -> Result<&Head, String> {
        while self.splitter.head().is_none() {
            self.fill().await?;
        }
        Ok(self.splitter.head().expect("head"))
    }

    async fn fill(&mut self) -> Result<bool, String> {
        match self.body.next().await {
            Some(Ok(chunk)) => {
                self.ready.extend(self.splitter.push(&chunk)?);
                Ok(true)
            }
            Some(Err(e)) => Err(format!("shard {}: {e}", self.url)),
            None if self.splitter.done() => Ok(false),
            None => Err(format!("shard {} ended its list early", self.url)),
        }
    }

    /// The next entry, or None after the last.
    async fn next(&mut self) -> Result<Option<Bytes>, String> {
        loop {
            if let Some(e) = self.ready.pop_front() {
                return Ok(Some(e));
            }
            if self.splitter.done() || !self.fill().await? {
                return Ok(self.ready.pop_front());
            }
        }
    }
}

/// The unpaged merged LIST at `rv`: every shard's list streamed through a k-way merge by key.
/// A shard's error answer (before any body is sent) is passed on as it is.
pub async fn streamed_list(shards: &RouterState, path_and_query: &str, headers: &HeaderMap, rv: u64) -> Result<Response<Body>, ApiError> {
    let accept = headers.get(header::ACCEPT);
    let urls = shards.urls();
    // One shard's body passes through as it is; several are split, one entry per line.
    let answers = futures::future::join_all(urls.iter().map(|u| shards.get_streaming(u, path_and_query, accept, urls.len() > 1))).await;
    let mut streams = Vec::new();
    let mut content_type = None;
    for (url, a) in urls.iter().zip(answers) {
        let resp = a?;
        let status = resp.status();
        if !status.is_success() {
            let body: Value = resp.json().await.unwrap_or(Value::Null);
            return Ok(passthrough(status, &body));
        }
        content_type.get_or_insert(resp.headers().get(header::CONTENT_TYPE).cloned());
        streams.push(ShardEntries { body: resp.bytes_stream().boxed(), splitter: EntrySplitter::new(), ready: Default::default(), url: url.clone() });
    }
    if streams.len() == 1 {
        // One shard's list at R is the answer as it stands: pass it through.
        let s = streams.pop().expect("one");
        let mut r = Response::new(Body::from_stream(s.body));
        *r.status_mut() = StatusCode::OK;
        r.headers_mut().insert(header::CONTENT_TYPE, content_type.flatten().unwrap_or(axum::http::HeaderValue::from_static("application/json")));
        return Ok(r);
    }
    for s in &mut streams {
        s.head().await.map_err(ApiError::unavailable)?;
    }
    let first = streams[0].splitter.head().expect("heads read above");
    let mut meta = first.list["metadata"].clone();
    meta["resourceVersion"] = Value::String(rv.to_string());
    let head = crate::list::list_head(first, &meta);

    // The merge runs beside the response: a bounded channel carries its output, so a slow
    // client slows the shards' reads rather than filling memory.
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    tokio::spawn(async move {
        let result = async {
            if tx.send(Ok(Bytes::from(head))).await.is_err() {
                return Ok(());
            }
            let mut current: Vec<Option<((String, String), Bytes)>> = Vec::with_capacity(streams.len());
            for s in &mut streams {
                current.push(s.next().await?.map(|e| (entry_key_of(&e), e)));
            }
            let mut first = true;
            let mut out = BytesMut::with_capacity(64 * 1024);
            loop {
                let Some(i) = (0..current.len()).filter(|&i| current[i].is_some()).min_by(|&a, &b| current[a].as_ref().map(|c| &c.0).cmp(&current[b].as_ref().map(|c| &c.0))) else { break };
                let (_, entry) = current[i].take().expect("chosen");
                if !first {
                    out.extend_from_slice(b",");
                }
                first = false;
                out.extend_from_slice(&entry);
                if out.len() >= 64 * 1024 && tx.send(Ok(out.split().freeze())).await.is_err() {
                    return Ok(());
                }
                current[i] = streams[i].next().await?.map(|e| (entry_key_of(&e), e));
            }
            out.extend_from_slice(b"]}");
            let _ = tx.send(Ok(out.freeze())).await;
            Ok::<(), String>(())
        }
        .await;
        if let Err(e) = result {
            // The status line is sent: all that is left is to end the body short, which the
            // client sees as a broken response, never as a complete list.
            tracing::warn!(error = %e, "streamed list broke off");
            let _ = tx.send(Err(std::io::Error::other(e))).await;
        }
    });
    let mut r = Response::new(Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx)));
    *r.status_mut() = StatusCode::OK;
    r.headers_mut().insert(header::CONTENT_TYPE, content_type.flatten().unwrap_or(axum::http::HeaderValue::from_static("application/json")));
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn split_all(body: &[u8], chunk: usize) -> (Head, Vec<Bytes>, bool) {
        let mut s = EntrySplitter::new();
        let mut out = Vec::new();
        for c in body.chunks(chunk.max(1)) {
            out.extend(s.push(c).unwrap());
        }
        let done = s.done();
        (s.head.take().expect("head"), out, done)
    }

    #[test]
    fn splits_items_and_rows_at_any_chunk_size() {
        let body = br#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[{"a":"}{","b":[1,{"c":"\"]"}]},{"d":{}} , {"e":"\\"}]}"#;
        for chunk in 1..body.len() + 1 {
            let (head, entries, done) = split_all(body, chunk);
            assert_eq!(head.list["metadata"]["resourceVersion"], "7");
            assert!(!head.rows && done);
            let texts: Vec<&str> = entries.iter().map(|e| std::str::from_utf8(e).unwrap()).collect();
            assert_eq!(texts, [r#"{"a":"}{","b":[1,{"c":"\"]"}]}"#, r#"{"d":{}}"#, r#"{"e":"\\"}"#], "chunk {chunk}");
        }
        let table = br#"{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{},"columnDefinitions":[{"name":"Name"}],"rows":[{"cells":["x"]}]}"#;
        let (head, entries, done) = split_all(table, 5);
        assert!(head.rows && done && head.list["columnDefinitions"][0]["name"] == "Name");
        assert_eq!(entries.len(), 1);
        let (_, entries, done) = split_all(br#"{"kind":"PodList","metadata":{},"items":[]}"#, 3);
        assert!(entries.is_empty() && done);
    }

    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![Just(Value::Null), any::<bool>().prop_map(Value::from), any::<i32>().prop_map(Value::from), "[ -~\\\\\"{}\\[\\]]{0,8}".prop_map(Value::from)];
        leaf.prop_recursive(3, 24, 4, |inner| prop_oneof![proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from), proptest::collection::btree_map("[a-z\"{}]{0,4}", inner, 0..4).prop_map(|m| Value::Object(m.into_iter().collect()))])
    }

    /// A list as a shard writes it when asked for line framing.
    fn framed(items: &[Value]) -> Vec<u8> {
        let mut body = br#"{"kind":"List","metadata":{"resourceVersion":"1"},"items":["#.to_vec();
        for (i, item) in items.iter().enumerate() {
            body.extend_from_slice(if i > 0 { b",\n" } else { b"\n" });
            body.extend(serde_json::to_vec(item).unwrap());
        }
        body.extend_from_slice(b"\n]}");
        body
    }

    #[test]
    fn splits_line_framed_lists_and_refuses_a_broken_line() {
        let items = [serde_json::json!({"a": "x\ny", "b": [1, {"c": "}"}]}), serde_json::json!({})];
        let body = framed(&items);
        for chunk in 1..body.len() + 1 {
            let (head, entries, done) = split_all(&body, chunk);
            assert!(done && head.list["metadata"]["resourceVersion"] == "1", "chunk {chunk}");
            let back: Vec<Value> = entries.iter().map(|e| serde_json::from_slice(e).unwrap()).collect();
            assert_eq!(back, items, "chunk {chunk}");
        }
        let (_, entries, done) = split_all(&framed(&[]), 2);
        assert!(done && entries.is_empty());
        let mut s = EntrySplitter::new();
        assert!(s.push(b"{\"kind\":\"List\",\"metadata\":{},\"items\":[\n{\"a\":\n1}\n]}").is_err());
    }

    proptest! {
        /// Any list of objects, cut anywhere, splits back into exactly its entries, in the
        /// compact layout and line-framed alike.
        #[test]
        fn entries_come_back_exactly(items in proptest::collection::vec(proptest::collection::btree_map("[a-z]{1,4}", value(), 0..4), 0..6), chunk in 1usize..40) {
            let items: Vec<Value> = items.into_iter().map(|m| Value::Object(m.into_iter().collect())).collect();
            let compact = serde_json::to_vec(&serde_json::json!({"kind": "List", "metadata": {"resourceVersion": "1"}, "items": items})).unwrap();
            for body in [compact, framed(&items)] {
                let (_, entries, done) = split_all(&body, chunk);
                prop_assert!(done);
                let back: Vec<Value> = entries.iter().map(|e| serde_json::from_slice(e).unwrap()).collect();
                prop_assert_eq!(&back, &items);
            }
        }
    }
}
