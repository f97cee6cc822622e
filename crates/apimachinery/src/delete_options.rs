//! DeleteOptions as a DELETE request carries them: a JSON (or protobuf-decoded) body and the
//! `gracePeriodSeconds` query parameter, read with upstream's types, so a field of the wrong type
//! or out of its range is a 400 instead of an option silently dropped.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::DeleteOptions;
use serde_json::Value;

use crate::ApiError;

/// Reads a DELETE's options: the body's (`{}` when empty), with the query's
/// `gracePeriodSeconds` taking precedence, as upstream's handler merges them.
pub fn parse(body: &Value, query_grace: Option<&str>) -> Result<DeleteOptions, ApiError> {
    let mut opts = <DeleteOptions as serde::Deserialize>::deserialize(body).map_err(|e| ApiError::bad_request(format!("error decoding DeleteOptions: {e}")))?;
    if let Some(v) = query_grace {
        let n = v.parse::<i64>().map_err(|_| ApiError::bad_request(format!("invalid gracePeriodSeconds: strconv.ParseInt: parsing {v:?}: invalid syntax")))?;
        opts.grace_period_seconds = Some(n);
    }
    Ok(opts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn types_and_ranges_are_upstreams() {
        assert_eq!(parse(&json!({"gracePeriodSeconds": i64::MIN}), None).unwrap().grace_period_seconds, Some(i64::MIN));
        assert_eq!(parse(&json!({"gracePeriodSeconds": 5}), Some("0")).unwrap().grace_period_seconds, Some(0));
        assert_eq!(parse(&json!({}), None).unwrap().grace_period_seconds, None);
        for bad in [json!({"gracePeriodSeconds": 18446744073709551615u64}), json!({"gracePeriodSeconds": "5"}), json!({"preconditions": {"uid": 7}}), json!({"orphanDependents": "yes"}), json!([1])] {
            assert_eq!(parse(&bad, None).unwrap_err().code, 400, "{bad}");
        }
        assert_eq!(parse(&json!({}), Some("9223372036854775808")).unwrap_err().code, 400);
    }
}
