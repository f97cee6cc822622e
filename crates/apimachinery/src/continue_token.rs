//! Continue tokens in upstream's format: `base64url(JSON{"v":"meta.k8s.io/v1","rv":N,"start":K})`,
//! where `K` is the last returned key followed by `\0`. Our keys are `namespace/name` (cluster-scoped
//! objects: `/name`), which sorts like the (namespace, name) order of every list. A router adds
//! the range-map epoch its pages were read under (`"epoch"`); shards ignore it.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Wire {
    v: String,
    rv: i64,
    start: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    epoch: Option<u64>,
}

/// A decoded continue token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContinueToken {
    /// The revision every page is read at; `None` for upstream's `rv: -1` ("continue at latest").
    pub rv: Option<u64>,
    /// Resume strictly after this (namespace, name).
    pub after: (String, String),
    /// The range-map epoch of a router's pages (None from a shard).
    pub epoch: Option<u64>,
}

impl ContinueToken {
    /// Encodes the token.
    pub fn encode(&self) -> String {
        let start = format!("{}/{}\0", self.after.0, self.after.1);
        let rv = self.rv.map_or(-1, |r| r as i64);
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(&Wire { v: "meta.k8s.io/v1".into(), rv, start, epoch: self.epoch }).expect("token serializes"))
    }

    /// Decodes a token; the error text follows `invalid continue token: `.
    pub fn decode(s: &str) -> Result<Self, String> {
        let raw = URL_SAFE_NO_PAD.decode(s.trim_end_matches('=')).map_err(|e| format!("invalid continue token: {e}"))?;
        let w: Wire = serde_json::from_slice(&raw).map_err(|e| format!("invalid continue token: {e}"))?;
        if w.v != "meta.k8s.io/v1" {
            return Err("invalid continue token: continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)".into());
        }
        let rv = match w.rv {
            -1 => None,
            r if r > 0 => Some(r as u64),
            _ => return Err("invalid continue token: continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)".into()),
        };
        let key = w.start.strip_suffix('\0').unwrap_or(&w.start);
        if key.contains('\0') || key.split('/').any(|seg| seg == ".." || seg == ".") {
            return Err("invalid continue token: continue key is not valid".into());
        }
        let (ns, name) = key.split_once('/').ok_or_else(|| "invalid continue token: continue key is not valid".to_owned())?;
        Ok(Self { rv, after: (ns.to_owned(), name.to_owned()), epoch: w.epoch })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trips(rv in proptest::option::of(1u64..i64::MAX as u64), ns in "[a-z0-9-]{0,20}", name in "[a-z0-9]([a-z0-9.-]{0,28}[a-z0-9])?", epoch in proptest::option::of(any::<u64>())) {
            let t = ContinueToken { rv, after: (ns, name), epoch };
            prop_assert_eq!(ContinueToken::decode(&t.encode()).unwrap(), t);
        }

        #[test]
        fn garbage_never_panics(s in ".{0,80}") {
            let _ = ContinueToken::decode(&s);
        }
    }

    #[test]
    fn refuses_garbage() {
        assert!(ContinueToken::decode("not-base64!").is_err());
        assert!(ContinueToken::decode(&URL_SAFE_NO_PAD.encode(br#"{"v":"x","rv":1,"start":"a/b"}"#)).is_err());
        assert!(ContinueToken::decode(&URL_SAFE_NO_PAD.encode(br#"{"v":"meta.k8s.io/v1","rv":0,"start":"a/b"}"#)).is_err());
    }
}
