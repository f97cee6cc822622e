//! The shared request layer driven with arbitrary bytes over a real socket, against a shard on a
//! real etcd: every method token, path segment, query byte, header value and body a client can
//! put on the wire gets an HTTP answer that is not a server error, every error body is a
//! `Status` with the response's code, and no handler panics (the panic counter stays at zero).

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use shardplane_keyspace::RangeSet;
use shardplane_testkit::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// One request as bytes on the wire.
#[derive(Debug, Clone)]
struct Wire {
    method: String,
    path: String,
    query: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
}

/// Every byte percent-encoded except unreserved ASCII, so the request line stays one line
/// while the decoded text is anything at all (bad UTF-8, NULs, multi-byte characters).
fn encode(bytes: &[u8]) -> String {
    bytes.iter().map(|&b| if b.is_ascii_alphanumeric() || b"-._~=&,!()".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") }).collect()
}

/// A query value: raw bytes, or text shaped like the parameters' grammars (selectors, numbers,
/// durations) with multi-byte characters and operators anywhere in it.
fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..16),
        "[a-z.]{0,8}[é€𝄞]{0,2}[a-z.]{0,4}(=|==|!=| in | notin |,|\\(|\\)){0,2}[a-zé€𝄞0-9\\\\,]{0,8}".prop_map(String::into_bytes),
        "[0-9]{0,20}[a-zµé]{0,3}[0-9.]{0,4}".prop_map(String::into_bytes),
    ]
}

fn wire() -> impl Strategy<Value = Wire> {
    let method = prop_oneof![4 => Just("GET".to_owned()), 1 => Just("POST".to_owned()), 1 => Just("PUT".to_owned()), 1 => Just("PATCH".to_owned()), 1 => Just("DELETE".to_owned()), 1 => "[A-Z]{1,8}"];
    let prefix = prop_oneof![
        Just("/api/v1/namespaces/fuzz/configmaps"),
        Just("/api/v1/namespaces/fuzz/configmaps/canary"),
        Just("/api/v1/namespaces"),
        Just("/apis/apps/v1/namespaces/fuzz/deployments"),
        Just("/apis/apiextensions.k8s.io/v1/customresourcedefinitions"),
        Just("/apis"),
        Just(""),
    ];
    // Mostly none: the realistic prefixes are where the parsers run.
    let segments = prop_oneof![3 => Just(Vec::new()), 1 => proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..12), 1..3)];
    let query = proptest::collection::vec((prop_oneof![Just(b"labelSelector".to_vec()), Just(b"fieldSelector".to_vec()), Just(b"limit".to_vec()), Just(b"continue".to_vec()), Just(b"resourceVersion".to_vec()), Just(b"watch".to_vec()), Just(b"timeoutSeconds".to_vec()), Just(b"timeout".to_vec()), Just(b"dryRun".to_vec()), Just(b"fieldValidation".to_vec()), proptest::collection::vec(any::<u8>(), 0..8)], value()), 0..4);
    let content_type = prop_oneof![
        Just(b"application/json".to_vec()),
        Just(b"application/yaml".to_vec()),
        Just(b"application/vnd.kubernetes.protobuf".to_vec()),
        Just(b"application/merge-patch+json".to_vec()),
        Just(b"application/json-patch+json".to_vec()),
        Just(b"application/strategic-merge-patch+json".to_vec()),
        Just(b"application/apply-patch+yaml".to_vec()),
        proptest::collection::vec(32u8..127, 0..24),
    ];
    let accept = prop_oneof![Just(b"application/json".to_vec()), Just(b"application/json;as=Table;v=v1;g=meta.k8s.io".to_vec()), Just(b"application/vnd.kubernetes.protobuf".to_vec()), proptest::collection::vec(32u8..127, 0..24)];
    let body = prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..256),
        Just(br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"canary"},"data":{"a":"b"}}"#.to_vec()),
        "[{}\\[\\]\":,a-z0-9 é]{0,64}".prop_map(String::into_bytes),
    ];
    (method, prefix, segments, query, content_type, accept, body).prop_map(|(method, prefix, segments, query, ct, accept, body)| {
        let mut path = prefix.to_owned();
        for s in segments {
            path.push('/');
            path.push_str(&encode(&s));
        }
        if path.is_empty() {
            path.push('/');
        }
        let query = query.iter().map(|(k, v)| format!("{}={}", encode(k), encode(v))).collect::<Vec<_>>().join("&");
        Wire { method, path, query, headers: vec![("Content-Type".into(), ct), ("Accept".into(), accept)], body }
    })
}

/// Sends `w` on a fresh connection; the status code and body of the answer.
fn send(addr: &str, w: &Wire) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let target = if w.query.is_empty() { w.path.clone() } else { format!("{}?{}", w.path, w.query) };
    let mut req = format!("{} {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n", w.method, w.body.len()).into_bytes();
    for (k, v) in &w.headers {
        req.extend_from_slice(k.as_bytes());
        req.extend_from_slice(b": ");
        req.extend_from_slice(v);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"\r\n");
    req.extend_from_slice(&w.body);
    let _ = s.write_all(&req);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out);
    let code = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or_else(|| panic!("no HTTP answer to {w:?}: {text:?}"));
    let body = out.windows(4).position(|x| x == b"\r\n\r\n").map(|i| out[i + 4..].to_vec()).unwrap_or_default();
    (code, body)
}

/// The body of a chunked or plain answer as JSON, if it is JSON.
fn json_of(body: &[u8]) -> Option<serde_json::Value> {
    serde_json::from_slice(body).ok().or_else(|| {
        // Chunked: the first chunk holds a Status (they are small).
        let text = std::str::from_utf8(body).ok()?;
        let start = text.find('{')?;
        let end = text.rfind('}')?;
        serde_json::from_str(&text[start..=end]).ok()
    })
}

#[test]
fn arbitrary_requests_get_an_answer_that_is_not_a_server_error() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (etcd, shard) = rt.block_on(async {
        let etcd = Etcd::start().await;
        // Watches (any `watch` value but 0 and false) end within seconds.
        let s = TestShard::start(shardplane_shard::ShardConfig { min_request_timeout: Duration::from_secs(2), ..test_config(&etcd, RangeSet::full()) }).await;
        s.namespace("fuzz").await;
        let (code, _) = s.post("/api/v1/namespaces/fuzz/configmaps", &configmap("canary", serde_json::json!({}))).await;
        assert_eq!(code, 201);
        (etcd, s)
    });
    let addr = shard.url.trim_start_matches("http://").to_owned();
    let mut runner = TestRunner::new(Config { cases: 2000, failure_persistence: None, ..Config::default() });
    let result = runner.run(&wire(), |w| {
        let (code, body) = send(&addr, &w);
        // Waits on an RV the store never reaches answer 504; nothing else may be a 5xx.
        prop_assert!(code < 500 || code == 504, "{code} for {w:?}: {}", String::from_utf8_lossy(&body));
        if code >= 400
            && let Some(v) = json_of(&body)
        {
            prop_assert_eq!(v["kind"].as_str(), Some("Status"), "{:?}", w);
            prop_assert_eq!(v["code"].as_u64(), Some(u64::from(code)), "{:?}", w);
        }
        Ok(())
    });
    result.unwrap();
    let metrics = rt.block_on(async { client().get(format!("{}/metrics", shard.url)).send().await.unwrap().text().await.unwrap() });
    let panics = metrics.lines().find(|l| l.starts_with("shardplane_request_panics_total")).expect("the panic counter is exported");
    assert!(panics.ends_with(" 0"), "{panics}");
    drop(shard);
    drop(etcd);
}
