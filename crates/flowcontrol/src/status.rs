//! The `Dangling` condition of a FlowSchema's status, as upstream's configuration controller
//! keeps it (RFC 0013, "Status"): `True` (reason `NotFound`) when the schema names a priority
//! level that does not exist, `False` (reason `Found`) when it does. The owner of each schema
//! writes it (a shard, for the schemas in its ranges); this module only says what it should be.

use serde_json::{json, Value};

/// The condition's type.
pub const DANGLING: &str = "Dangling";

/// `schema` with its Dangling condition set for the levels named in `levels`, at `now`
/// (RFC 3339); `None` when the stored condition already says so.
pub fn with_dangling(schema: &Value, levels: &[&str], now: &str) -> Option<Value> {
    let level = schema.pointer("/spec/priorityLevelConfiguration/name").and_then(Value::as_str).unwrap_or("");
    let found = levels.contains(&level);
    let (status, reason, message) = if found {
        ("False", "Found", format!("This FlowSchema references the PriorityLevelConfiguration object named {level:?} and it exists"))
    } else {
        ("True", "NotFound", format!("This FlowSchema references the PriorityLevelConfiguration object named {level:?} but there is no such object"))
    };
    let conditions = schema.pointer("/status/conditions").and_then(Value::as_array).cloned().unwrap_or_default();
    let current = conditions.iter().find(|c| c["type"] == DANGLING);
    if current.is_some_and(|c| c["status"] == status && c["reason"] == reason && c["message"] == message.as_str()) {
        return None;
    }
    // The transition time moves only when the status does.
    let since = current.filter(|c| c["status"] == status).and_then(|c| c["lastTransitionTime"].as_str()).unwrap_or(now).to_owned();
    let mut next: Vec<Value> = conditions.into_iter().filter(|c| c["type"] != DANGLING).collect();
    next.push(json!({"type": DANGLING, "status": status, "lastTransitionTime": since, "reason": reason, "message": message}));
    let mut out = schema.clone();
    out["status"]["conditions"] = Value::Array(next);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schema_is_dangling_until_its_level_exists_and_an_unchanged_condition_is_not_rewritten() {
        let s = json!({"metadata": {"name": "s"}, "spec": {"priorityLevelConfiguration": {"name": "gold"}}});
        let lost = with_dangling(&s, &["exempt", "catch-all"], "2026-01-01T00:00:00Z").expect("set");
        let c = &lost["status"]["conditions"][0];
        assert_eq!((c["type"].as_str(), c["status"].as_str(), c["reason"].as_str()), (Some("Dangling"), Some("True"), Some("NotFound")));
        assert_eq!(c["message"], "This FlowSchema references the PriorityLevelConfiguration object named \"gold\" but there is no such object");
        assert_eq!(with_dangling(&lost, &["catch-all"], "2026-01-02T00:00:00Z"), None);
        let found = with_dangling(&lost, &["gold"], "2026-01-03T00:00:00Z").expect("changed");
        let c = &found["status"]["conditions"][0];
        assert_eq!((c["status"].as_str(), c["reason"].as_str(), c["lastTransitionTime"].as_str()), (Some("False"), Some("Found"), Some("2026-01-03T00:00:00Z")));
        assert_eq!(found["status"]["conditions"].as_array().unwrap().len(), 1);
    }
}
