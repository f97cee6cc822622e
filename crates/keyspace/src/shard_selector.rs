//! KEP-5866 `shardSelector`: `shardRange(object.metadata.uid, '0x…', '0x…') || …`.
//!
//! The selector filters by FNV-1a 64 of the raw bytes of the object's uid or namespace. It is
//! parsed, never evaluated as CEL. Rules follow the upstream alpha parser: only `shardRange` calls
//! joined by `||`, one field for all terms, bounds of exactly 16 lowercase hex digits (or
//! `0x10000000000000000` as an end), start below end. The canonical text (what `metadata.shardInfo`
//! echoes) joins `shardRange(field, 'start', 'end')` terms with `" || "`.
//!
//! We hand-write this small parser rather than pull in a CEL crate: the grammar admits exactly one
//! function and one operator, and the error messages must match upstream's.

use crate::range::{format_bound, parse_bound};

/// FNV-1a 64 as Go's `hash/fnv` computes it.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Which object field a selector hashes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShardField {
    /// `object.metadata.uid`
    Uid,
    /// `object.metadata.namespace`
    Namespace,
}

impl ShardField {
    fn as_str(self) -> &'static str {
        match self {
            ShardField::Uid => "object.metadata.uid",
            ShardField::Namespace => "object.metadata.namespace",
        }
    }
}

/// A parsed shard selector: a union of `[start, end)` ranges over one field's FNV-1a hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardSelector {
    field: ShardField,
    ranges: Vec<(u128, u128)>,
}

impl ShardSelector {
    /// The field the selector hashes.
    pub fn field(&self) -> ShardField {
        self.field
    }

    /// Whether an object with this uid and namespace matches.
    pub fn matches(&self, uid: &str, namespace: &str) -> bool {
        let value = match self.field {
            ShardField::Uid => uid,
            ShardField::Namespace => namespace,
        };
        let h = fnv1a64(value.as_bytes()) as u128;
        self.ranges.iter().any(|(s, e)| h >= *s && h < *e)
    }

    /// The canonical text, as echoed in `metadata.shardInfo.selector`.
    pub fn canonical(&self) -> String {
        self.ranges
            .iter()
            .map(|(s, e)| format!("shardRange({}, '{}', '{}')", self.field.as_str(), format_bound(*s), format_bound(*e)))
            .collect::<Vec<_>>()
            .join(" || ")
    }

    /// Parses a selector; the error text is what upstream puts after `invalid shard selector: `.
    pub fn parse(input: &str) -> Result<Self, String> {
        if input.trim().is_empty() {
            return Err("empty shard selector is not allowed; omit the parameter".into());
        }
        let mut p = Parser { s: input.as_bytes(), i: 0 };
        let mut field = None;
        let mut ranges = Vec::new();
        loop {
            let (f, start, end) = p.term()?;
            match field {
                None => field = Some(f),
                Some(prev) if prev != f => return Err("all shardRange() calls must use the same field".into()),
                _ => {}
            }
            ranges.push((start, end));
            p.ws();
            if p.eat("||") {
                continue;
            }
            if p.i != p.s.len() {
                return Err(format!("unexpected input at position {}: {:?}", p.i, &input[p.i..]));
            }
            break;
        }
        Ok(Self { field: field.expect("at least one term"), ranges })
    }
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }

    fn eat(&mut self, tok: &str) -> bool {
        self.ws();
        if self.s[self.i..].starts_with(tok.as_bytes()) {
            self.i += tok.len();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, tok: &str) -> Result<(), String> {
        if self.eat(tok) { Ok(()) } else { Err(format!("expected {tok:?} at position {}", self.i)) }
    }

    fn ident(&mut self) -> String {
        self.ws();
        let start = self.i;
        while self.i < self.s.len() && (self.s[self.i].is_ascii_alphanumeric() || matches!(self.s[self.i], b'.' | b'_')) {
            self.i += 1;
        }
        String::from_utf8_lossy(&self.s[start..self.i]).into_owned()
    }

    fn string(&mut self) -> Result<String, String> {
        self.ws();
        let quote = match self.s.get(self.i) {
            Some(q @ (b'\'' | b'"')) => *q,
            _ => return Err(format!("expected a quoted hex bound at position {}", self.i)),
        };
        self.i += 1;
        let start = self.i;
        while self.i < self.s.len() && self.s[self.i] != quote {
            self.i += 1;
        }
        if self.i == self.s.len() {
            return Err("unterminated string".into());
        }
        let v = String::from_utf8_lossy(&self.s[start..self.i]).into_owned();
        self.i += 1;
        Ok(v)
    }

    fn term(&mut self) -> Result<(ShardField, u128, u128), String> {
        let func = self.ident();
        if func != "shardRange" {
            return Err(format!("unsupported function or expression {func:?}: only shardRange() joined by || is allowed"));
        }
        self.expect("(")?;
        let field = match self.ident().as_str() {
            "object.metadata.uid" => ShardField::Uid,
            "object.metadata.namespace" => ShardField::Namespace,
            other => return Err(format!("unsupported field {other:?}: must be object.metadata.uid or object.metadata.namespace")),
        };
        self.expect(",")?;
        let start = bound(&self.string()?)?;
        self.expect(",")?;
        let end = bound(&self.string()?)?;
        self.expect(")")?;
        if start >= end {
            return Err(format!("start {} must be less than end {}", format_bound(start), format_bound(end)));
        }
        if start == crate::HASH_SPACE_END {
            return Err("start must be below 0x10000000000000000".into());
        }
        Ok((field, start, end))
    }
}

fn bound(s: &str) -> Result<u128, String> {
    parse_bound(s).map_err(|_| {
        let hint = s
            .strip_prefix("0x")
            .filter(|h| !h.is_empty() && h.len() < 16 && h.bytes().all(|b| b.is_ascii_hexdigit()))
            .map(|h| format!(" (did you mean \"0x{:0>16}\"?)", h.to_ascii_lowercase()))
            .unwrap_or_default();
        format!("must be a 0x-prefixed 16-digit hex value, got {s:?}{hint}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn fnv_vectors_from_the_reference() {
        for (input, want) in [
            ("", 0xcbf29ce484222325u64),
            ("a", 0xaf63dc4c8601ec8c),
            ("abc", 0xe71fa2190541574b),
            ("aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", 0x93754b7248a00eb9),
            ("default", 0xebada5168620c5fe),
            ("kube-system", 0xdf65c7bc1d82b35e),
        ] {
            assert_eq!(fnv1a64(input.as_bytes()), want, "{input:?}");
        }
    }

    #[test]
    fn parses_union_and_prints_canonically() {
        let s = ShardSelector::parse("shardRange(object.metadata.uid,'0x0000000000000000', '0x4000000000000000')||shardRange( object.metadata.uid , '0x8000000000000000','0xc000000000000000' )").unwrap();
        assert_eq!(
            s.canonical(),
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x4000000000000000') || shardRange(object.metadata.uid, '0x8000000000000000', '0xc000000000000000')"
        );
        // 0x93754b7248a00eb9 falls in the second range.
        assert!(s.matches("aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", "x"));
        let ns = ShardSelector::parse("shardRange(object.metadata.namespace, '0xe000000000000000', '0x10000000000000000')").unwrap();
        assert!(ns.matches("", "default"));
        assert!(!ns.matches("", "kube-system"));
    }

    #[test]
    fn rejects_what_upstream_rejects() {
        let err = ShardSelector::parse("shardRange(object.metadata.uid, '0x0', '0x8000000000000000')").unwrap_err();
        assert!(err.contains("did you mean \"0x0000000000000000\""), "{err}");
        for bad in [
            "",
            "   ",
            "shardRange(object.metadata.name, '0x0000000000000000', '0x8000000000000000')",
            "shardRange(object.metadata.uid, '0x8000000000000000', '0x8000000000000000')",
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') && true",
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') || shardRange(object.metadata.namespace, '0x8000000000000000', '0x10000000000000000')",
            "shardRange(object.metadata.uid, '0X0000000000000000', '0x8000000000000000')",
            "shardRange(object.metadata.uid, '0x000000000000000A', '0x8000000000000000')",
            "foo(object.metadata.uid)",
        ] {
            assert!(ShardSelector::parse(bad).is_err(), "{bad:?} should be refused");
        }
    }

    proptest! {
        /// Selectors for the two halves of any cut partition every object.
        #[test]
        fn complementary_selectors_partition(cut in 1u64.., uid in "[a-f0-9-]{0,36}") {
            let lo = ShardSelector::parse(&format!("shardRange(object.metadata.uid, '0x0000000000000000', '0x{cut:016x}')")).unwrap();
            let hi = ShardSelector::parse(&format!("shardRange(object.metadata.uid, '0x{cut:016x}', '0x10000000000000000')")).unwrap();
            prop_assert!(lo.matches(&uid, "") != hi.matches(&uid, ""));
            // The canonical form parses back to the same selector.
            prop_assert_eq!(ShardSelector::parse(&lo.canonical()).unwrap(), lo);
        }
    }
}
