//! Upstream's field errors (`field.Required`, `field.Invalid`, …) as Status causes, with the
//! message text `field.Error.ErrorBody` writes, and the Go `%#v` forms those messages quote for
//! the few struct values the rules here report (label maps, label selectors, role references).

use crate::status::{cause, StatusCause};
use serde_json::Value;

/// `field.Required`.
pub fn required(field: &str) -> StatusCause {
    cause("FieldValueRequired", field, "Required value")
}

/// `field.Forbidden` with `detail`.
pub fn forbidden(field: &str, detail: &str) -> StatusCause {
    cause("FieldValueForbidden", field, format!("Forbidden: {detail}"))
}

/// `field.Invalid` of a value already written as Go prints it (`"x"`, `0`, `map[string]string{…}`).
pub fn invalid_shown(field: &str, shown: &str, detail: &str) -> StatusCause {
    cause("FieldValueInvalid", field, format!("Invalid value: {shown}: {detail}"))
}

/// `field.Invalid` of a JSON scalar (strings quoted, numbers and booleans bare).
pub fn invalid(field: &str, value: &Value, detail: &str) -> StatusCause {
    invalid_shown(field, &scalar(value), detail)
}

/// `field.Duplicate` of a string.
pub fn duplicate(field: &str, value: &str) -> StatusCause {
    cause("FieldValueDuplicate", field, format!("Duplicate value: {value:?}"))
}

/// `field.NotSupported` of a string among `supported`.
pub fn not_supported(field: &str, value: &str, supported: &[&str]) -> StatusCause {
    let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
    cause("FieldValueNotSupported", field, format!("Unsupported value: {value:?}: supported values: {}", list.join(", ")))
}

/// A scalar as upstream's error prints it.
pub fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Null => "null".into(),
        other => other.to_string(),
    }
}

/// Go's `%#v` of a `map[string]string` (fmt sorts the keys).
pub fn go_string_map(v: Option<&Value>) -> String {
    match v.and_then(Value::as_object) {
        None => "map[string]string(nil)".into(),
        Some(m) => {
            let pairs: Vec<String> = m.iter().map(|(k, v)| format!("{k:?}:{:?}", v.as_str().unwrap_or(""))).collect();
            format!("map[string]string{{{}}}", pairs.join(", "))
        }
    }
}

/// Go's `%#v` of a `[]string`.
pub fn go_strings(v: Option<&Value>) -> String {
    match v.and_then(Value::as_array) {
        None => "[]string(nil)".into(),
        Some(a) => format!("[]string{{{}}}", a.iter().map(|s| format!("{:?}", s.as_str().unwrap_or(""))).collect::<Vec<_>>().join(", ")),
    }
}

/// Go's `%#v` of a `metav1.LabelSelector` (upstream's errors print the value a pointer points to).
pub fn go_label_selector(v: &Value) -> String {
    let expressions = match v.get("matchExpressions").and_then(Value::as_array) {
        None => "[]v1.LabelSelectorRequirement(nil)".to_owned(),
        Some(a) => {
            let each: Vec<String> = a
                .iter()
                .map(|r| format!("v1.LabelSelectorRequirement{{Key:{:?}, Operator:{:?}, Values:{}}}", r["key"].as_str().unwrap_or(""), r["operator"].as_str().unwrap_or(""), go_strings(r.get("values"))))
                .collect();
            format!("[]v1.LabelSelectorRequirement{{{}}}", each.join(", "))
        }
    };
    format!("v1.LabelSelector{{MatchLabels:{}, MatchExpressions:{expressions}}}", go_string_map(v.get("matchLabels")))
}

/// Whether a label selector (`matchLabels` and `matchExpressions`) selects `labels`.
pub fn selector_matches(selector: &Value, labels: Option<&Value>) -> bool {
    let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
    let by_labels = selector.get("matchLabels").and_then(Value::as_object).into_iter().flatten().all(|(k, v)| get(k) == v.as_str());
    let by_expressions = selector.get("matchExpressions").and_then(Value::as_array).into_iter().flatten().all(|r| {
        let key = r["key"].as_str().unwrap_or("");
        let values: Vec<&str> = r.get("values").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
        match r["operator"].as_str() {
            Some("In") => get(key).is_some_and(|v| values.contains(&v)),
            Some("NotIn") => get(key).is_none_or(|v| !values.contains(&v)),
            Some("Exists") => get(key).is_some(),
            Some("DoesNotExist") => get(key).is_none(),
            _ => false,
        }
    });
    by_labels && by_expressions
}

/// Whether a selector selects nothing in particular (no labels, no expressions).
pub fn selector_is_empty(selector: &Value) -> bool {
    selector.get("matchLabels").and_then(Value::as_object).is_none_or(|m| m.is_empty()) && selector.get("matchExpressions").and_then(Value::as_array).is_none_or(|a| a.is_empty())
}

/// A port number's range check (`must be between 1 and 65535, inclusive`), if `v` is out of it.
pub fn port_number(field: &str, v: &Value) -> Option<StatusCause> {
    let n = v.as_i64()?;
    (!(1..=65535).contains(&n)).then(|| invalid(field, v, "must be between 1 and 65535, inclusive"))
}

/// Go's `%#v` of an `intstr.IntOrString`, as upstream's errors on one print it.
pub fn go_int_or_string(v: &Value) -> String {
    match v {
        Value::String(s) => format!("intstr.IntOrString{{Type:1, IntVal:0, StrVal:{s:?}}}"),
        other => format!("intstr.IntOrString{{Type:0, IntVal:{}, StrVal:\"\"}}", other.as_i64().unwrap_or(0)),
    }
}

/// Upstream's `IsValidPortName` (an IANA service name): each rule a name breaks.
pub fn port_name_errors(name: &str) -> Vec<&'static str> {
    let mut errs = Vec::new();
    if name.len() > 15 {
        errs.push("must be no more than 15 characters");
    }
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') {
        errs.push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)");
    }
    if !name.bytes().any(|b| b.is_ascii_lowercase()) {
        errs.push("must contain at least one letter (a-z)");
    }
    if name.contains("--") {
        errs.push("must not contain consecutive hyphens");
    }
    if name.starts_with('-') || name.ends_with('-') {
        errs.push("must not begin or end with a hyphen");
    }
    errs
}

/// A port given by name or number (a probe's port, a Service's target port): a name under
/// `IsValidPortName`, a number in range.
pub fn named_or_numbered_port(field: &str, v: &Value, causes: &mut Vec<StatusCause>) {
    match v.as_str() {
        Some(name) => causes.extend(port_name_errors(name).into_iter().map(|why| invalid(field, v, why))),
        None => causes.extend(port_number(field, v)),
    }
}

/// The fields of `causes`, in order (what the rules' tests compare).
#[cfg(test)]
pub fn fields(causes: &[StatusCause]) -> Vec<&str> {
    causes.iter().map(|c| c.field.as_str()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_names_are_short_lowercase_with_a_letter_and_single_inner_hyphens() {
        assert!(port_name_errors("http-alt").is_empty());
        assert_eq!(port_name_errors("HTTP"), ["must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)", "must contain at least one letter (a-z)"]);
        assert_eq!(port_name_errors("-a--very-long-port-name"), ["must be no more than 15 characters", "must not contain consecutive hyphens", "must not begin or end with a hyphen"]);
        assert_eq!(port_name_errors("8080"), ["must contain at least one letter (a-z)"]);
    }
}
