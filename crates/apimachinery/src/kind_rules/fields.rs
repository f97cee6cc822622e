//! Reading the JSON fields the rules check (absent and mistyped fields read as empty, so a rule
//! reports them as upstream reports a zero value) and the field rules several kinds share: a
//! name under a naming rule, a label selector, an immutable field.

use super::errors::{forbidden, invalid, invalid_shown, required};
use crate::meta::{validate_label_value, validate_qualified_name};
use crate::status::{cause, StatusCause};
use serde_json::Value;

/// A string field of `v` (`""` when absent or not a string).
pub fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// A list field of `v` (empty when absent or not a list).
pub fn items<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key).and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

/// The list at a JSON pointer (empty when absent or not a list).
pub fn items_at<'a>(v: &'a Value, pointer: &str) -> &'a [Value] {
    v.pointer(pointer).and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

/// The strings of a list field (what is not a string left out).
pub fn strings<'a>(v: &'a Value, key: &str) -> Vec<&'a str> {
    items(v, key).iter().filter_map(Value::as_str).collect()
}

/// `field.TooMany`.
pub fn too_many(field: &str, n: usize, max: usize) -> StatusCause {
    cause("FieldValueTooMany", field, format!("Too many: {n}: must have at most {max} items"))
}

/// `field.TooLong` (upstream no longer quotes the value).
pub fn too_long(field: &str, max: usize) -> StatusCause {
    cause("FieldValueTooLong", field, format!("Too long: may not be more than {max} bytes"))
}

/// `value` under a naming `rule`, an `Invalid` cause for each failure.
pub fn check(field: &str, value: &str, rule: fn(&str) -> Result<(), String>, causes: &mut Vec<StatusCause>) {
    if let Err(why) = rule(value) {
        causes.push(invalid(field, &Value::from(value), &why));
    }
}

/// A required name under `rule` (`field.Required` when empty).
pub fn required_name(field: &str, value: &str, rule: fn(&str) -> Result<(), String>, causes: &mut Vec<StatusCause>) {
    if value.is_empty() {
        causes.push(required(field));
    } else {
        check(field, value, rule, causes);
    }
}

/// A number that may not be negative (upstream's `ValidateNonnegativeField`), if present.
pub fn non_negative(field: &str, v: Option<&Value>, causes: &mut Vec<StatusCause>) {
    if let Some(n) = v.filter(|n| n.as_f64().is_some_and(|n| n < 0.0)) {
        causes.push(invalid(field, n, "must be greater than or equal to 0"));
    }
}

/// Upstream's `ValidateImmutableField` on the value at `pointer`: `shown` writes the new value
/// as Go's error prints it (an absent one is `null`, as a nil pointer is).
pub fn immutable(field: &str, pointer: &str, old: &Value, new: &Value, shown: impl Fn(&Value) -> String, causes: &mut Vec<StatusCause>) {
    let (was, is) = (old.pointer(pointer), new.pointer(pointer));
    if was != is {
        let text = is.filter(|v| !v.is_null()).map_or_else(|| "null".to_owned(), shown);
        causes.push(invalid_shown(field, &text, "field is immutable"));
    }
}

/// Labels as upstream's `ValidateLabels` checks them: each key a qualified name, each value a
/// label value, both reported at the map's path.
pub fn labels(map: Option<&Value>, path: &str, causes: &mut Vec<StatusCause>) {
    for (k, v) in map.and_then(Value::as_object).into_iter().flatten() {
        if let Err(why) = validate_qualified_name(k) {
            causes.push(invalid(path, &Value::from(k.as_str()), &why));
        }
        let value = v.as_str().unwrap_or("");
        if let Err(why) = validate_label_value(value) {
            causes.push(invalid(path, &Value::from(value), &why));
        }
    }
}

/// A `metav1.LabelSelector` as upstream's `ValidateLabelSelector` checks it.
pub fn label_selector(selector: Option<&Value>, path: &str, causes: &mut Vec<StatusCause>) {
    let Some(selector) = selector.filter(|s| !s.is_null()) else { return };
    labels(selector.get("matchLabels"), &format!("{path}.matchLabels"), causes);
    for (i, r) in items(selector, "matchExpressions").iter().enumerate() {
        selector_requirement(r, &format!("{path}.matchExpressions[{i}]"), false, causes);
    }
}

/// One requirement of a label selector or (`node`) of a node selector, which also knows `Gt`
/// and `Lt` and leaves its values unchecked, as upstream's `ValidateNodeSelectorRequirement`.
pub fn selector_requirement(r: &Value, at: &str, node: bool, causes: &mut Vec<StatusCause>) {
    let values = items(r, "values");
    match s(r, "operator") {
        "In" | "NotIn" if values.is_empty() => causes.push(cause("FieldValueRequired", &format!("{at}.values"), "Required value: must be specified when `operator` is 'In' or 'NotIn'")),
        "Exists" | "DoesNotExist" if !values.is_empty() => causes.push(forbidden(&format!("{at}.values"), "may not be specified when `operator` is 'Exists' or 'DoesNotExist'")),
        "Gt" | "Lt" if node && values.len() != 1 => causes.push(cause("FieldValueRequired", &format!("{at}.values"), "Required value: must be specified single value when `operator` is 'Lt' or 'Gt'")),
        "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
        "Gt" | "Lt" if node => {}
        other => causes.push(invalid(&format!("{at}.operator"), &Value::from(other), "not a valid selector operator")),
    }
    check(&format!("{at}.key"), s(r, "key"), validate_qualified_name, causes);
    if !node {
        for (j, v) in values.iter().enumerate() {
            check(&format!("{at}.values[{j}]"), v.as_str().unwrap_or(""), validate_label_value, causes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::errors::fields;
    use super::*;
    use serde_json::json;

    #[test]
    fn a_selector_needs_values_exactly_for_in_and_not_in_and_known_operators() {
        let mut causes = Vec::new();
        let sel = json!({"matchLabels": {"ok": "bad value"}, "matchExpressions": [
            {"key": "a", "operator": "In"},
            {"key": "b", "operator": "Exists", "values": ["x"]},
            {"key": "c", "operator": "Near"},
            {"key": "d", "operator": "In", "values": ["fine"]}]});
        label_selector(Some(&sel), "sel", &mut causes);
        assert_eq!(fields(&causes), ["sel.matchLabels", "sel.matchExpressions[0].values", "sel.matchExpressions[1].values", "sel.matchExpressions[2].operator"]);
        assert_eq!(causes[2].message, "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'");
    }
}
