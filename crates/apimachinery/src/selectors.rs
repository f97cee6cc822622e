//! Label and field selectors: parsing with upstream's grammar and validation, and matching.
//!
//! Label selectors: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`, `k>n`, `k<n`,
//! joined by commas. Field selectors: `f=v`, `f==v`, `f!=v` joined by commas, with `\` escapes.
//! Hand-written because no maintained Rust crate parses Kubernetes selector strings (kube-core only
//! builds them); see RFCS/0001.

use crate::meta::{validate_label_value, validate_qualified_name};
use crate::resources::ResourceInfo;
use serde_json::Value;

/// A label selector operator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// `=` or `==`
    Equals,
    /// `!=`
    NotEquals,
    /// `in (..)`
    In,
    /// `notin (..)`
    NotIn,
    /// bare key
    Exists,
    /// `!key`
    DoesNotExist,
    /// `>`
    GreaterThan,
    /// `<`
    LessThan,
}

/// One requirement of a label selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    pub key: String,
    pub op: Op,
    pub values: Vec<String>,
}

impl Requirement {
    fn matches<S: AsRef<str>>(&self, get: &impl Fn(&str) -> Option<S>) -> bool {
        let v = get(&self.key);
        let v = v.as_ref().map(AsRef::as_ref);
        match self.op {
            Op::Equals | Op::In => v.is_some_and(|v| self.values.iter().any(|x| x == v)),
            Op::NotEquals | Op::NotIn => v.is_none_or(|v| !self.values.iter().any(|x| x == v)),
            Op::Exists => v.is_some(),
            Op::DoesNotExist => v.is_none(),
            Op::GreaterThan | Op::LessThan => {
                let (Some(v), Ok(bound)) = (v.and_then(|v| v.parse::<i64>().ok()), self.values[0].parse::<i64>()) else { return false };
                if self.op == Op::GreaterThan { v > bound } else { v < bound }
            }
        }
    }
}

/// A parsed label selector; empty matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    pub requirements: Vec<Requirement>,
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Bang,
    Eq,
    DoubleEq,
    NotEq,
    Gt,
    Lt,
    Open,
    Close,
    Comma,
    In,
    NotIn,
}

fn lex(s: &str) -> Result<Vec<Tok>, String> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match c {
            b' ' | b'\t' | b'\n' | b'\r' => i += 1,
            b'!' if b.get(i + 1) == Some(&b'=') => {
                out.push(Tok::NotEq);
                i += 2
            }
            b'!' => {
                out.push(Tok::Bang);
                i += 1
            }
            b'=' if b.get(i + 1) == Some(&b'=') => {
                out.push(Tok::DoubleEq);
                i += 2
            }
            b'=' => {
                out.push(Tok::Eq);
                i += 1
            }
            b'>' => {
                out.push(Tok::Gt);
                i += 1
            }
            b'<' => {
                out.push(Tok::Lt);
                i += 1
            }
            b'(' => {
                out.push(Tok::Open);
                i += 1
            }
            b')' => {
                out.push(Tok::Close);
                i += 1
            }
            b',' => {
                out.push(Tok::Comma);
                i += 1
            }
            _ => {
                let start = i;
                while i < b.len() && !b" \t\n\r!=><(),".contains(&b[i]) {
                    i += 1;
                }
                let word = &s[start..i];
                out.push(match word {
                    "in" => Tok::In,
                    "notin" => Tok::NotIn,
                    w => Tok::Ident(w.to_owned()),
                });
            }
        }
    }
    Ok(out)
}

impl LabelSelector {
    /// Whether the selector selects everything.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Parses a selector string; the error is upstream-worded and becomes a 400.
    pub fn parse(s: &str) -> Result<Self, String> {
        let toks = lex(s)?;
        let mut reqs = Vec::new();
        let mut i = 0;
        let ident = |t: Option<&Tok>, what: &str| -> Result<String, String> {
            match t {
                Some(Tok::Ident(v)) => Ok(v.clone()),
                Some(Tok::In) => Ok("in".into()),
                Some(Tok::NotIn) => Ok("notin".into()),
                other => Err(format!("found '{}', expected: {what}", tok_text(other))),
            }
        };
        while i < toks.len() {
            let negated = toks[i] == Tok::Bang;
            if negated {
                i += 1;
            }
            let key = ident(toks.get(i), "identifier").map_err(|e| format!("unable to parse requirement: {e}"))?;
            i += 1;
            validate_qualified_name(&key).map_err(|e| format!("unable to parse requirement: key: Invalid value: {key:?}: {e}"))?;
            if negated {
                reqs.push(Requirement { key, op: Op::DoesNotExist, values: vec![] });
            } else {
                match toks.get(i) {
                    None | Some(Tok::Comma) => reqs.push(Requirement { key, op: Op::Exists, values: vec![] }),
                    Some(op @ (Tok::Eq | Tok::DoubleEq | Tok::NotEq | Tok::Gt | Tok::Lt)) => {
                        let op = match op {
                            Tok::Eq | Tok::DoubleEq => Op::Equals,
                            Tok::NotEq => Op::NotEquals,
                            Tok::Gt => Op::GreaterThan,
                            _ => Op::LessThan,
                        };
                        i += 1;
                        // An empty value (`k=`) is allowed for = and !=.
                        let value = match toks.get(i) {
                            None | Some(Tok::Comma) if matches!(op, Op::Equals | Op::NotEquals) => String::new(),
                            t => {
                                i += 1;
                                ident(t, "identifier").map_err(|e| format!("unable to parse requirement: {e}"))?
                            }
                        };
                        if matches!(op, Op::GreaterThan | Op::LessThan) && value.parse::<i64>().is_err() {
                            return Err(format!("unable to parse requirement: for 'Gt', 'Lt' operators, the value must be an integer: {value:?}"));
                        }
                        validate_label_value(&value).map_err(|e| format!("unable to parse requirement: values[0][{key}]: Invalid value: {value:?}: {e}"))?;
                        reqs.push(Requirement { key, op, values: vec![value] });
                    }
                    Some(t @ (Tok::In | Tok::NotIn)) => {
                        let op = if *t == Tok::In { Op::In } else { Op::NotIn };
                        i += 1;
                        if toks.get(i) != Some(&Tok::Open) {
                            return Err(format!("unable to parse requirement: found '{}', expected: '('", tok_text(toks.get(i))));
                        }
                        i += 1;
                        let mut values = Vec::new();
                        loop {
                            match toks.get(i) {
                                Some(Tok::Close) if values.is_empty() => {
                                    return Err("unable to parse requirement: for 'in', 'notin' operators, values set can't be empty".into());
                                }
                                Some(Tok::Ident(v)) => values.push(v.clone()),
                                Some(Tok::In) => values.push("in".into()),
                                Some(Tok::NotIn) => values.push("notin".into()),
                                Some(Tok::Comma) | Some(Tok::Close) => values.push(String::new()),
                                other => return Err(format!("unable to parse requirement: found '{}', expected: ',', ')' or identifier", tok_text(other))),
                            }
                            if matches!(toks.get(i), Some(Tok::Ident(_) | Tok::In | Tok::NotIn)) {
                                i += 1;
                            }
                            match toks.get(i) {
                                Some(Tok::Comma) => i += 1,
                                Some(Tok::Close) => {
                                    i += 1;
                                    break;
                                }
                                other => return Err(format!("unable to parse requirement: found '{}', expected: ',' or ')'", tok_text(other))),
                            }
                        }
                        for v in &values {
                            validate_label_value(v).map_err(|e| format!("unable to parse requirement: values[0][{key}]: Invalid value: {v:?}: {e}"))?;
                        }
                        values.sort();
                        values.dedup();
                        reqs.push(Requirement { key, op, values });
                    }
                    other => return Err(format!("unable to parse requirement: found '{}', expected: in, notin, =, ==, !=, gt, lt", tok_text(other))),
                }
            }
            match toks.get(i) {
                None => break,
                Some(Tok::Comma) => {
                    i += 1;
                    if i == toks.len() {
                        return Err("found '', expected: identifier after ','".into());
                    }
                }
                other => return Err(format!("found '{}', expected: ',' or 'end of string'", tok_text(other))),
            }
        }
        Ok(Self { requirements: reqs })
    }

    /// Whether labels (looked up by `get`, borrowed or owned) satisfy every requirement.
    pub fn matches<S: AsRef<str>>(&self, get: impl Fn(&str) -> Option<S>) -> bool {
        self.requirements.iter().all(|r| r.matches(&get))
    }

    /// Matches against a `metadata.labels` JSON object (absent or null means no labels).
    pub fn matches_json(&self, labels: Option<&Value>) -> bool {
        let map = labels.and_then(Value::as_object);
        self.matches(|k| map.and_then(|m| m.get(k)).and_then(Value::as_str))
    }
}

fn tok_text(t: Option<&Tok>) -> String {
    match t {
        None => String::new(),
        Some(Tok::Ident(s)) => s.clone(),
        Some(Tok::Bang) => "!".into(),
        Some(Tok::Eq) => "=".into(),
        Some(Tok::DoubleEq) => "==".into(),
        Some(Tok::NotEq) => "!=".into(),
        Some(Tok::Gt) => ">".into(),
        Some(Tok::Lt) => "<".into(),
        Some(Tok::Open) => "(".into(),
        Some(Tok::Close) => ")".into(),
        Some(Tok::Comma) => ",".into(),
        Some(Tok::In) => "in".into(),
        Some(Tok::NotIn) => "notin".into(),
    }
}

/// One `field op value` term of a field selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldTerm {
    pub field: String,
    pub equals: bool,
    pub value: String,
}

/// A parsed field selector; empty matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector {
    pub terms: Vec<FieldTerm>,
}

impl FieldSelector {
    /// Whether the selector selects everything.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// Parses a selector and checks every field is selectable on `resource`.
    pub fn parse(s: &str, resource: &ResourceInfo) -> Result<Self, String> {
        let mut terms = Vec::new();
        if s.is_empty() {
            return Ok(Self { terms });
        }
        for raw in split_unescaped(s, ',') {
            if raw.is_empty() {
                continue;
            }
            let (field, equals, value) = split_term(&raw).ok_or_else(|| format!("invalid selector: '{s}'; can't understand '{raw}'"))?;
            let label = unescape(field)?;
            let value = unescape(value)?;
            // Terms name the stored version's fields, which the cache indexes.
            let field = match crate::conversion::field_label(resource, &label) {
                Some(f) if resource.supports_field(&f) => f.into_owned(),
                _ => return Err(format!("field label not supported: {label}")),
            };
            terms.push(FieldTerm { field, equals, value });
        }
        Ok(Self { terms })
    }

    /// Whether the object's selectable field values (looked up by `get`) satisfy every term.
    pub fn matches<S: AsRef<str>>(&self, get: impl Fn(&str) -> S) -> bool {
        self.terms.iter().all(|t| (get(&t.field).as_ref() == t.value) == t.equals)
    }

    /// The value a term requires for `metadata.name`, when the selector pins one name.
    pub fn required_name(&self) -> Option<&str> {
        self.terms.iter().find(|t| t.equals && t.field == "metadata.name").map(|t| t.value.as_str())
    }
}

/// A valid field selector `raw` (on `resource`) taken apart for an index on `field` (RFC 0015,
/// "Indexed dispatch"): when exactly one term requires `field` to equal a value and no other term
/// names `field`, that value and the selector's other terms as they were written; else None.
pub fn split_on_index(raw: &str, resource: &ResourceInfo, field: &str) -> Option<(String, String)> {
    let mut value = None;
    let mut rest = Vec::new();
    for term in split_unescaped(raw, ',') {
        if term.is_empty() {
            continue;
        }
        let (label, equals, v) = split_term(&term)?;
        let named = crate::conversion::field_label(resource, &unescape(label).ok()?).is_some_and(|f| f == field);
        match (named, equals) {
            (true, true) if value.is_none() => value = Some(unescape(v).ok()?),
            (true, _) => return None,
            (false, _) => rest.push(term),
        }
    }
    Some((value?, rest.join(",")))
}

fn split_unescaped(s: &str, sep: char) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut escaped = false;
    for c in s.chars() {
        if escaped {
            out.last_mut().unwrap().push('\\');
            out.last_mut().unwrap().push(c);
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == sep {
            out.push(String::new());
        } else {
            out.last_mut().unwrap().push(c);
        }
    }
    if escaped {
        out.last_mut().unwrap().push('\\');
    }
    out
}

fn split_term(term: &str) -> Option<(&str, bool, &str)> {
    let b = term.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' {
            i += 2;
            continue;
        }
        // Compared as bytes: `i` may sit inside a multi-byte character (an escape skips two
        // bytes), and the operators are ASCII, which never occurs inside one, so the slices
        // below are at character boundaries.
        for (op, eq) in [("!=", false), ("==", true), ("=", true)] {
            if b[i..].starts_with(op.as_bytes()) {
                return Some((&term[..i], eq, &term[i + op.len()..]));
            }
        }
        i += 1;
    }
    None
}

fn unescape(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some(e @ ('\\' | ',' | '=')) => out.push(e),
                Some(e) => return Err(format!("invalid field selector: invalid escape sequence: \\{e}")),
                None => return Err("invalid field selector: unterminated escape".into()),
            }
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

/// What upstream's field sets print for a built-in selectable field the object leaves out: the
/// Go zero value of its type (a node without `spec.unschedulable` is `false`, a replica set
/// without `status.replicas` is `0`).
fn zero_value(field: &str) -> &'static str {
    match field {
        "spec.unschedulable" | "spec.hostNetwork" => "false",
        "status.replicas" | "status.successful" => "0",
        _ => "",
    }
}

/// The value of a selectable field in an object, as upstream's field sets print it.
pub fn field_value(obj: &Value, field: &str) -> String {
    let path = if field == "source" { "source.component" } else { field };
    let mut v = obj;
    for part in path.split('.') {
        match v.get(part) {
            Some(next) => v = next,
            None => return zero_value(field).to_owned(),
        }
    }
    match v {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Null => zero_value(field).to_owned(),
        other => other.to_string(),
    }
}

/// A `metav1.LabelSelector` (JSON) as a selector string, as upstream's
/// `LabelSelectorAsSelector(…).String()` writes it: requirements sorted by key, `k=v` for match
/// labels, `k in (a,b)`, `k notin (a,b)`, `k` and `!k` for expressions, values sorted.
pub fn label_selector_text(sel: &Value) -> String {
    let mut reqs: Vec<(String, String)> = Vec::new();
    for (k, v) in sel.get("matchLabels").and_then(Value::as_object).into_iter().flatten() {
        reqs.push((k.clone(), format!("{k}={}", v.as_str().unwrap_or(""))));
    }
    for e in sel.get("matchExpressions").and_then(Value::as_array).into_iter().flatten() {
        let key = e.get("key").and_then(Value::as_str).unwrap_or("").to_owned();
        let mut values: Vec<&str> = e.get("values").and_then(Value::as_array).map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
        values.sort_unstable();
        let text = match e.get("operator").and_then(Value::as_str).unwrap_or("") {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.clone(),
            "DoesNotExist" => format!("!{key}"),
            _ => continue,
        };
        reqs.push((key, text));
    }
    reqs.sort_by(|a, b| a.0.cmp(&b.0));
    reqs.into_iter().map(|(_, t)| t).collect::<Vec<_>>().join(",")
}

/// A label map as a selector string (`a=b,c=d`, by key).
pub fn labels_text(labels: &Value) -> String {
    let mut parts: Vec<String> = labels.as_object().into_iter().flatten().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or(""))).collect();
    parts.sort();
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{builtin_resources, find};
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn labels(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + Clone {
        let m: BTreeMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn every_operator() {
        let l = labels(&[("app", "web"), ("tier", "front"), ("n", "5")]);
        for (sel, want) in [
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app in (web,db)", true),
            ("app notin (web)", false),
            ("app", true),
            ("!app", false),
            ("!missing", true),
            ("missing!=x", true),
            ("n>4", true),
            ("n<5", false),
            ("app=web,tier=front", true),
            ("app=web,tier=back", false),
            ("example.com/key", false),
            ("", true),
        ] {
            assert_eq!(LabelSelector::parse(sel).unwrap().matches(l.clone()), want, "{sel}");
        }
    }

    #[test]
    fn bad_label_selectors_are_refused() {
        for bad in ["app=(", "app in web", "app in ()", "a b", "app=web,", "-bad=x", "app=web!", "n>x", "app=" ] {
            if bad == "app=" {
                assert!(LabelSelector::parse(bad).is_ok());
                continue;
            }
            assert!(LabelSelector::parse(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn a_selector_splits_on_its_index_term() {
        let all = builtin_resources();
        let pods = find(&all, "", "v1", "pods").unwrap();
        let split = |raw: &str, field: &str| split_on_index(raw, pods, field);
        assert_eq!(split("spec.nodeName=n1", "spec.nodeName"), Some(("n1".into(), String::new())));
        assert_eq!(split(r"status.phase!=Failed,spec.nodeName==n\,1", "spec.nodeName"), Some(("n,1".into(), "status.phase!=Failed".into())));
        assert_eq!(split("metadata.name=a,status.phase=Running", "metadata.name"), Some(("a".into(), "status.phase=Running".into())));
        // Not indexable: no term, an inequality, or the field named twice.
        assert_eq!(split("status.phase=Running", "spec.nodeName"), None);
        assert_eq!(split("spec.nodeName!=n1", "spec.nodeName"), None);
        assert_eq!(split("spec.nodeName=n1,spec.nodeName=n2", "spec.nodeName"), None);
        assert_eq!(split("spec.nodeName=n1,spec.nodeName!=n2", "spec.nodeName"), None);
        assert_eq!(split("", "spec.nodeName"), None);
        // The rest, parsed, selects what the whole did for objects with the index's value.
        let (value, rest) = split("spec.nodeName=n1,status.phase=Running", "spec.nodeName").unwrap();
        let whole = FieldSelector::parse("spec.nodeName=n1,status.phase=Running", pods).unwrap();
        let rest = FieldSelector::parse(&rest, pods).unwrap();
        for (node, phase) in [("n1", "Running"), ("n1", "Failed"), ("n2", "Running")] {
            let obj = serde_json::json!({"spec": {"nodeName": node}, "status": {"phase": phase}});
            let get = |f: &str| field_value(&obj, f);
            assert_eq!(whole.matches(get), node == value && rest.matches(get));
        }
    }

    #[test]
    fn field_selectors() {
        let all = builtin_resources();
        let pods = find(&all, "", "v1", "pods").unwrap();
        let obj = serde_json::json!({"metadata": {"name": "a,b", "namespace": "x"}, "spec": {"nodeName": "n1", "hostNetwork": true}, "status": {"phase": "Running"}});
        let get = |f: &str| field_value(&obj, f);
        let sel = FieldSelector::parse(r"metadata.name=a\,b,spec.nodeName!=n2,status.phase==Running,spec.hostNetwork=true", pods).unwrap();
        assert!(sel.matches(get));
        assert_eq!(sel.required_name(), Some("a,b"));
        assert_eq!(FieldSelector::parse("spec.foo=x", pods).unwrap_err(), "field label not supported: spec.foo");
        assert!(FieldSelector::parse("nonsense", pods).is_err());
    }

    proptest! {
        /// Any text, multi-byte characters and escapes anywhere, gets an answer from both
        /// parsers: a selector or an error, never a panic.
        #[test]
        fn any_text_gets_an_answer(s in "[a-z.=!,()\\\\ é€𝄞]{0,24}") {
            let all = builtin_resources();
            let pods = find(&all, "", "v1", "pods").unwrap();
            let _ = FieldSelector::parse(&s, pods);
            let _ = LabelSelector::parse(&s);
        }

        /// `k in (vs)` is the disjunction of `k=v`, and `k notin (vs)` its negation.
        #[test]
        fn in_is_a_disjunction(vals in proptest::collection::vec("[a-z]{1,3}", 1..4), actual in proptest::option::of("[a-z]{1,3}")) {
            let l = move |k: &str| if k == "k" { actual.clone() } else { None };
            let set = LabelSelector::parse(&format!("k in ({})", vals.join(","))).unwrap();
            let any_eq = vals.iter().any(|v| LabelSelector::parse(&format!("k={v}")).unwrap().matches(&l));
            prop_assert_eq!(set.matches(&l), any_eq);
            let not = LabelSelector::parse(&format!("k notin ({})", vals.join(","))).unwrap();
            prop_assert_eq!(not.matches(&l), !any_eq);
        }
    }

    #[test]
    fn label_selectors_are_written_as_upstream_writes_them() {
        let sel = serde_json::json!({"matchLabels": {"tier": "web", "app": "x"}, "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod", "dev"]}, {"key": "gone", "operator": "DoesNotExist"}]});
        assert_eq!(label_selector_text(&sel), "app=x,env in (dev,prod),!gone,tier=web");
        assert_eq!(labels_text(&serde_json::json!({"b": "2", "a": "1"})), "a=1,b=2");
        // What is written parses back to the same selector.
        assert!(LabelSelector::parse(&label_selector_text(&sel)).is_ok());
    }

    #[test]
    fn absent_typed_fields_select_as_their_zero_value() {
        let node = serde_json::json!({"spec": {}});
        assert_eq!(field_value(&node, "spec.unschedulable"), "false");
        assert_eq!(field_value(&serde_json::json!({"spec": {"unschedulable": true}}), "spec.unschedulable"), "true");
        assert_eq!(field_value(&serde_json::json!({}), "status.replicas"), "0");
        assert_eq!(field_value(&serde_json::json!({}), "spec.nodeName"), "");
    }
}
