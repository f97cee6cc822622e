//! DeleteOptions as a DELETE request carries them: a JSON (or protobuf-decoded) body and the
//! `gracePeriodSeconds` query parameter, read with upstream's types, so a field of the wrong type
//! or out of its range is a 400 instead of an option silently dropped.

pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::DeleteOptions;
use serde_json::Value;

use crate::ApiError;

/// The finalizer that makes the garbage collector orphan an object's dependents before the
/// object goes (`propagationPolicy: Orphan`).
pub const ORPHAN_FINALIZER: &str = "orphan";
/// The finalizer that keeps an object until the garbage collector has deleted its blocking
/// dependents (`propagationPolicy: Foreground`).
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";

/// What the query of a DELETE may carry of its options besides `dryRun` (upstream decodes the
/// query over the body's DeleteOptions).
#[derive(Default)]
pub struct QueryOptions<'a> {
    pub grace_period_seconds: Option<&'a str>,
    pub propagation_policy: Option<&'a str>,
    pub orphan_dependents: Option<&'a str>,
}

/// Reads a DELETE's options: the body's (`{}` when empty), with the query's
/// `gracePeriodSeconds`, `propagationPolicy` and `orphanDependents` taking precedence, as
/// upstream's handler merges them; then validated as upstream validates them (a policy that
/// is not one of the three, or given with `orphanDependents`, is a 422).
pub fn parse(body: &Value, query: QueryOptions<'_>) -> Result<DeleteOptions, ApiError> {
    let mut opts = <DeleteOptions as serde::Deserialize>::deserialize(body).map_err(|e| ApiError::bad_request(format!("error decoding DeleteOptions: {e}")))?;
    if let Some(v) = query.grace_period_seconds {
        let n = v.parse::<i64>().map_err(|_| ApiError::bad_request(format!("invalid gracePeriodSeconds: strconv.ParseInt: parsing {v:?}: invalid syntax")))?;
        opts.grace_period_seconds = Some(n);
    }
    if let Some(v) = query.propagation_policy {
        opts.propagation_policy = Some(v.to_owned());
    }
    if let Some(v) = query.orphan_dependents {
        let b = v.parse::<bool>().map_err(|_| ApiError::bad_request(format!("invalid orphanDependents: strconv.ParseBool: parsing {v:?}: invalid syntax")))?;
        opts.orphan_dependents = Some(b);
    }
    // A protobuf body's decoder gives an unset optional field as its zero value.
    if opts.propagation_policy.as_deref() == Some("") {
        opts.propagation_policy = None;
    }
    validate(&opts)?;
    Ok(opts)
}

fn validate(opts: &DeleteOptions) -> Result<(), ApiError> {
    let mut causes = Vec::new();
    if let Some(p) = &opts.propagation_policy {
        if opts.orphan_dependents.is_some() {
            causes.push(crate::status::cause("FieldValueInvalid", "propagationPolicy", &format!("Invalid value: {p:?}: orphanDependents and deletionPropagation cannot be both set")));
        } else if !["Foreground", "Background", "Orphan"].contains(&p.as_str()) {
            causes.push(crate::status::cause("FieldValueNotSupported", "propagationPolicy", &format!("Unsupported value: {p:?}: supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\"")));
        }
    }
    if causes.is_empty() { Ok(()) } else { Err(ApiError::invalid("meta.k8s.io", "DeleteOptions", "", causes)) }
}

/// The finalizers a DELETE leaves on the object for the garbage collector, as upstream's
/// registry computes them: an explicit `orphanDependents` or `propagationPolicy` decides, else
/// a GC finalizer the object already has stays (every served kind's default policy is
/// Background). `None` when they are the object's finalizers already.
pub fn finalizers_for_deletion(opts: &DeleteOptions, existing: &[&str]) -> Option<Vec<String>> {
    let has = |f: &str| existing.contains(&f);
    let (orphan, foreground) = match (opts.orphan_dependents, opts.propagation_policy.as_deref()) {
        (Some(o), _) => (o, false),
        (None, Some(p)) => (p == "Orphan", p == "Foreground"),
        (None, None) => (has(ORPHAN_FINALIZER), has(FOREGROUND_FINALIZER)),
    };
    let mut out: Vec<String> = existing.iter().filter(|f| **f != ORPHAN_FINALIZER && **f != FOREGROUND_FINALIZER).map(|f| f.to_string()).collect();
    if orphan {
        out.push(ORPHAN_FINALIZER.to_owned());
    }
    if foreground {
        out.push(FOREGROUND_FINALIZER.to_owned());
    }
    let same = out.len() == existing.len() && out.iter().all(|f| has(f));
    (!same).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn types_and_ranges_are_upstreams() {
        let none = || QueryOptions::default();
        let grace = |g| QueryOptions { grace_period_seconds: Some(g), ..Default::default() };
        assert_eq!(parse(&json!({"gracePeriodSeconds": i64::MIN}), none()).unwrap().grace_period_seconds, Some(i64::MIN));
        assert_eq!(parse(&json!({"gracePeriodSeconds": 5}), grace("0")).unwrap().grace_period_seconds, Some(0));
        assert_eq!(parse(&json!({}), none()).unwrap().grace_period_seconds, None);
        for bad in [json!({"gracePeriodSeconds": 18446744073709551615u64}), json!({"gracePeriodSeconds": "5"}), json!({"preconditions": {"uid": 7}}), json!({"orphanDependents": "yes"}), json!([1])] {
            assert_eq!(parse(&bad, none()).unwrap_err().code, 400, "{bad}");
        }
        assert_eq!(parse(&json!({}), grace("9223372036854775808")).unwrap_err().code, 400);
    }

    #[test]
    fn a_policy_is_one_of_three_and_never_given_with_orphan_dependents() {
        let none = || QueryOptions::default();
        for p in ["Foreground", "Background", "Orphan"] {
            assert_eq!(parse(&json!({"propagationPolicy": p}), none()).unwrap().propagation_policy.as_deref(), Some(p));
        }
        let e = parse(&json!({"propagationPolicy": "Sideways"}), none()).unwrap_err();
        assert_eq!((e.code, e.reason), (422, "Invalid"));
        assert_eq!(e.message, "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: \"Sideways\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\"");
        let e = parse(&json!({"propagationPolicy": "Orphan", "orphanDependents": true}), none()).unwrap_err();
        assert_eq!(e.code, 422);
        assert!(e.message.contains("orphanDependents and deletionPropagation cannot be both set"), "{}", e.message);
        // The query's values take the body's place.
        let q = QueryOptions { propagation_policy: Some("Foreground"), ..Default::default() };
        assert_eq!(parse(&json!({"propagationPolicy": "Orphan"}), q).unwrap().propagation_policy.as_deref(), Some("Foreground"));
        let q = QueryOptions { orphan_dependents: Some("maybe"), ..Default::default() };
        assert_eq!(parse(&json!({}), q).unwrap_err().code, 400);
    }

    #[test]
    fn deletion_finalizers_follow_upstreams_rules() {
        let opts = |v: Value| parse(&v, QueryOptions::default()).unwrap();
        let owned = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let finalizers_for_deletion = |o: &DeleteOptions, e: &[String]| finalizers_for_deletion(o, &e.iter().map(String::as_str).collect::<Vec<_>>());
        // Background, the default: nothing to add.
        assert_eq!(finalizers_for_deletion(&opts(json!({})), &[]), None);
        assert_eq!(finalizers_for_deletion(&opts(json!({"propagationPolicy": "Background"})), &owned(&["x"])), None);
        assert_eq!(finalizers_for_deletion(&opts(json!({"propagationPolicy": "Orphan"})), &owned(&["x"])), Some(owned(&["x", "orphan"])));
        assert_eq!(finalizers_for_deletion(&opts(json!({"orphanDependents": true})), &[]), Some(owned(&["orphan"])));
        assert_eq!(finalizers_for_deletion(&opts(json!({"orphanDependents": false})), &owned(&["orphan"])), Some(vec![]));
        assert_eq!(finalizers_for_deletion(&opts(json!({"propagationPolicy": "Foreground"})), &[]), Some(owned(&["foregroundDeletion"])));
        // An explicit policy replaces the other GC finalizer.
        assert_eq!(finalizers_for_deletion(&opts(json!({"propagationPolicy": "Foreground"})), &owned(&["orphan"])), Some(owned(&["foregroundDeletion"])));
        assert_eq!(finalizers_for_deletion(&opts(json!({"propagationPolicy": "Background"})), &owned(&["orphan", "a"])), Some(owned(&["a"])));
        // With no options, a GC finalizer the object has stays.
        assert_eq!(finalizers_for_deletion(&opts(json!({})), &owned(&["orphan"])), None);
    }
}
