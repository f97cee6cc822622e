//! Object metadata rules: name and label validation, and the metadata helpers every write uses.
//!
//! Objects are handled as `serde_json::Value` only transiently while a write is prepared; the
//! cache and the wire keep bytes.

use crate::resources::{NameRule, ResourceInfo};
use crate::status::{cause, StatusCause};
use serde_json::{Map, Value};

const DNS1123_LABEL_MAX: usize = 63;
const DNS1123_SUBDOMAIN_MAX: usize = 253;
/// Upstream's limit on the total size of annotations.
pub const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

fn is_alnum_lower(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// RFC 1123 label: lower-case alphanumerics and '-', starting and ending alphanumeric, ≤ 63.
pub fn validate_dns1123_label(s: &str) -> Result<(), String> {
    let b = s.as_bytes();
    if b.len() > DNS1123_LABEL_MAX {
        return Err(format!("must be no more than {DNS1123_LABEL_MAX} characters"));
    }
    if b.is_empty() || !b.iter().all(|c| is_alnum_lower(*c) || *c == b'-') || !is_alnum_lower(b[0]) || !is_alnum_lower(b[b.len() - 1]) {
        return Err("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')".into());
    }
    Ok(())
}

/// RFC 1035 label: like an RFC 1123 label but starting with a letter.
pub fn validate_dns1035_label(s: &str) -> Result<(), String> {
    let b = s.as_bytes();
    if b.len() > DNS1123_LABEL_MAX {
        return Err(format!("must be no more than {DNS1123_LABEL_MAX} characters"));
    }
    if b.is_empty() || !b[0].is_ascii_lowercase() || !b.iter().all(|c| is_alnum_lower(*c) || *c == b'-') || !is_alnum_lower(b[b.len() - 1]) {
        return Err("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')".into());
    }
    Ok(())
}

/// RFC 1123 subdomain: dot-separated labels, ≤ 253.
pub fn validate_dns1123_subdomain(s: &str) -> Result<(), String> {
    if s.len() > DNS1123_SUBDOMAIN_MAX {
        return Err(format!("must be no more than {DNS1123_SUBDOMAIN_MAX} characters"));
    }
    // Upstream's subdomain pattern bounds only the whole (253), not each label.
    let label_ok = |l: &str| {
        let b = l.as_bytes();
        !b.is_empty() && b.iter().all(|c| is_alnum_lower(*c) || *c == b'-') && is_alnum_lower(b[0]) && is_alnum_lower(b[b.len() - 1])
    };
    if !s.is_empty() && s.split('.').all(label_ok) {
        Ok(())
    } else {
        Err("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".into())
    }
}

fn qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// A label or annotation key: `[prefix/]name`, the prefix a DNS subdomain.
pub fn validate_qualified_name(s: &str) -> Result<(), String> {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    if let Some(p) = prefix {
        if p.is_empty() {
            return Err("prefix part must be non-empty".into());
        }
        validate_dns1123_subdomain(p).map_err(|e| format!("prefix part {e}"))?;
    }
    if name.contains('/') || !qualified_name_part(name) {
        return Err("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')".into());
    }
    Ok(())
}

/// A label value: empty, or ≤ 63 alphanumerics with '-', '_', '.' inside.
pub fn validate_label_value(s: &str) -> Result<(), String> {
    if s.is_empty() || qualified_name_part(s) {
        Ok(())
    } else if s.len() > 63 {
        Err("must be no more than 63 characters".into())
    } else {
        Err("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')".into())
    }
}

/// Validates `metadata.name` under a resource's rule.
pub fn validate_name(rule: NameRule, name: &str) -> Result<(), String> {
    match rule {
        NameRule::Subdomain => validate_dns1123_subdomain(name),
        NameRule::Label => validate_dns1123_label(name),
        NameRule::Label1035 => validate_dns1035_label(name),
        NameRule::PathSegment => {
            if name == "." || name == ".." {
                Err(format!("may not be '{name}'"))
            } else if let Some(c) = ['/', '%'].into_iter().find(|c| name.contains(*c)) {
                // Upstream lists each illegal character it finds; the first is said here.
                Err(format!("may not contain '{c}'"))
            } else {
                Ok(())
            }
        }
        NameRule::IpAddress => name.parse::<std::net::IpAddr>().map(drop).map_err(|_| IP_ADDRESS_RULE.to_owned()),
    }
}

/// What upstream's `IsValidIP` says of a string that is not an IP address.
pub const IP_ADDRESS_RULE: &str = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)";

/// The current time as upstream writes `metav1.Time`: RFC 3339, whole seconds, UTC.
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A Unix time (seconds) as upstream writes `metav1.Time`.
pub fn rfc3339_at(unix_seconds: u64) -> String {
    let at = i64::try_from(unix_seconds).ok().and_then(|s| jiff::Timestamp::from_second(s).ok()).unwrap_or(jiff::Timestamp::MAX);
    at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A new object uid (random UUID v4, canonical text form).
pub fn new_uid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// `generateName` plus 5 random characters from upstream's alphabet, capped like upstream.
pub fn generate_name(prefix: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    const MAX_PREFIX: usize = 63 - 5;
    let prefix = if prefix.len() > MAX_PREFIX { &prefix[..MAX_PREFIX] } else { prefix };
    let bytes = uuid::Uuid::new_v4().into_bytes();
    let suffix: String = bytes.iter().take(5).map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char).collect();
    format!("{prefix}{suffix}")
}

/// `obj.metadata` as a mutable map, created if absent or not an object.
pub fn metadata_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = Value::Object(Map::new());
    }
    obj["metadata"].as_object_mut().expect("metadata is an object")
}

/// `obj.metadata.<field>` as a string, or "".
pub fn meta_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.get("metadata").and_then(|m| m.get(field)).and_then(Value::as_str).unwrap_or("")
}

fn validate_string_map(m: &Value, field: &str, values_are_labels: bool, causes: &mut Vec<StatusCause>) {
    let Some(map) = m.as_object() else {
        if !m.is_null() {
            causes.push(cause("FieldValueInvalid", field, "Invalid value: must be a map of strings"));
        }
        return;
    };
    let mut total = 0;
    for (k, v) in map {
        if let Err(e) = validate_qualified_name(k) {
            causes.push(cause("FieldValueInvalid", field, format!("Invalid value: {k:?}: {e}")));
        }
        match v.as_str() {
            Some(s) => {
                total += k.len() + s.len();
                if values_are_labels && let Err(e) = validate_label_value(s) {
                    causes.push(cause("FieldValueInvalid", field, format!("Invalid value: {s:?}: {e}")));
                }
            }
            None => causes.push(cause("FieldValueInvalid", &format!("{field}.{k}"), "Invalid value: must be a string")),
        }
    }
    if !values_are_labels && total > TOTAL_ANNOTATION_SIZE_LIMIT {
        causes.push(cause("FieldValueTooLong", field, format!("Too long: may not be more than {TOTAL_ANNOTATION_SIZE_LIMIT} bytes")));
    }
}

/// Validates an incoming object's type and metadata against the resource and request path.
/// Returns the causes for a 422; an empty vector means valid.
pub fn validate_object(info: &ResourceInfo, obj: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    let name = meta_str(obj, "name");
    if name.is_empty() {
        causes.push(cause("FieldValueRequired", "metadata.name", "Required value: name or generateName is required"));
    } else if let Err(e) = validate_name(info.name_rule, name) {
        causes.push(cause("FieldValueInvalid", "metadata.name", format!("Invalid value: {name:?}: {e}")));
    }
    if let Some(meta) = obj.get("metadata") {
        if let Some(l) = meta.get("labels") {
            validate_string_map(l, "metadata.labels", true, &mut causes);
        }
        if let Some(a) = meta.get("annotations") {
            validate_string_map(a, "metadata.annotations", false, &mut causes);
        }
        if let Some(f) = meta.get("finalizers") && !f.is_null() && !f.as_array().is_some_and(|a| a.iter().all(|x| x.as_str().is_some_and(|s| validate_qualified_name(s).is_ok()))) {
            causes.push(cause("FieldValueInvalid", "metadata.finalizers", "Invalid value: finalizers must be qualified names"));
        }
    }
    causes.extend(crate::kind_rules::validate(info, obj));
    causes
}

/// Sets `metadata.resourceVersion` on an object read back from storage.
pub fn set_resource_version(obj: &mut Value, rv: u64) {
    metadata_mut(obj).insert("resourceVersion".into(), Value::String(rv.to_string()));
}

/// Whether the object still has finalizers.
/// The object's `metadata.finalizers` (empty when it has none).
pub fn finalizers(obj: &Value) -> Vec<&str> {
    obj.pointer("/metadata/finalizers").and_then(Value::as_array).map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default()
}

pub fn has_finalizers(obj: &Value) -> bool {
    obj.pointer("/metadata/finalizers").and_then(Value::as_array).is_some_and(|a| !a.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(validate_dns1123_subdomain("a.b-c.d").is_ok());
        assert!(validate_dns1123_subdomain("A").is_err());
        assert!(validate_dns1123_label("a.b").is_err());
        assert!(validate_dns1035_label("1abc").is_err());
        assert!(validate_qualified_name("example.com/app").is_ok());
        assert!(validate_qualified_name("/app").is_err());
        assert!(validate_label_value(&"a".repeat(64)).is_err());
        let g = generate_name("web-");
        assert!(g.starts_with("web-") && g.len() == 9 && validate_dns1123_subdomain(&g).is_ok());
    }

}
