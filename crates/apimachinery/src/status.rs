//! `Status` error objects with upstream's codes, reasons, messages and details.

use serde::Serialize;
use serde_json::Value;

/// One field-level cause of an error (`details.causes[]`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StatusCause {
    /// Machine-readable cause, e.g. `FieldValueInvalid`.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// The field path, e.g. `metadata.name`.
    pub field: String,
}

/// `details` of a Status.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct StatusDetails {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub group: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub causes: Vec<StatusCause>,
    #[serde(rename = "retryAfterSeconds", skip_serializing_if = "Option::is_none")]
    pub retry_after_seconds: Option<u64>,
}

/// An API failure, rendered as a `Status` object with HTTP code `code`.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    /// HTTP status code, also `Status.code`.
    pub code: u16,
    /// `Status.reason` (`NotFound`, `Conflict`, ...); empty for unknown errors.
    pub reason: &'static str,
    /// `Status.message`.
    pub message: String,
    /// `Status.details`, when upstream sets it.
    pub details: Option<StatusDetails>,
    /// `Status.metadata.continue` (set on an expired continue token).
    pub continue_token: Option<String>,
}

#[derive(Serialize)]
struct StatusMeta<'a> {
    #[serde(rename = "continue", skip_serializing_if = "Option::is_none")]
    continue_token: Option<&'a str>,
}

#[derive(Serialize)]
struct StatusBody<'a> {
    kind: &'static str,
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    metadata: StatusMeta<'a>,
    status: &'static str,
    message: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    reason: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<&'a StatusDetails>,
    code: u16,
}

/// Qualified resource name as upstream prints it: `pods` or `deployments.apps`.
pub fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() { resource.to_owned() } else { format!("{resource}.{group}") }
}

fn named(group: &str, resource: &str, name: &str) -> StatusDetails {
    StatusDetails { name: name.to_owned(), group: group.to_owned(), kind: resource.to_owned(), ..Default::default() }
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self { code, reason, message: message.into(), details: None, continue_token: None }
    }

    fn with_details(mut self, d: StatusDetails) -> Self {
        self.details = Some(d);
        self
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 404 NotFound for one object.
    pub fn not_found(group: &str, resource: &str, name: &str) -> Self {
        Self::new(404, "NotFound", format!("{} \"{name}\" not found", qualified(group, resource))).with_details(named(group, resource, name))
    }

    /// 404 NotFound for a path that names no resource.
    pub fn path_not_found() -> Self {
        Self::new(404, "NotFound", "the server could not find the requested resource").with_details(StatusDetails::default())
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(verb: &str, group: &str, resource: &str) -> Self {
        Self::new(405, "MethodNotAllowed", format!("{verb} is not supported on resources of kind \"{}\"", qualified(group, resource)))
            .with_details(StatusDetails::default())
    }

    /// 406 NotAcceptable.
    pub fn not_acceptable(accept: &str) -> Self {
        Self::new(406, "NotAcceptable", format!("only the following media types are accepted: application/json (requested {accept:?})"))
    }

    /// 406 NotAcceptable for a PartialObjectMetadata(List) request whose answer is the other
    /// shape (upstream names the internal Go type, e.g. `*core.PodList`).
    pub fn metadata_shape_mismatch(asked_list: bool, group: &str, kind: &str) -> Self {
        let package = if group.is_empty() { "core" } else { group.split('.').next().unwrap_or(group) };
        let message = if asked_list {
            format!("you requested PartialObjectMetadataList, but the requested object is not a list (*{package}.{kind})")
        } else {
            format!("you requested PartialObjectMetadata, but the requested object is a list (*{package}.{kind}List)")
        };
        Self::new(406, "NotAcceptable", message)
    }

    /// 409 AlreadyExists.
    pub fn already_exists(group: &str, resource: &str, name: &str) -> Self {
        Self::new(409, "AlreadyExists", format!("{} \"{name}\" already exists", qualified(group, resource))).with_details(named(group, resource, name))
    }

    /// 409 Conflict: optimistic-lock failure.
    pub fn conflict(group: &str, resource: &str, name: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                qualified(group, resource)
            ),
        )
        .with_details(named(group, resource, name))
    }

    /// 409 Conflict with a custom message (failed precondition, terminating namespace...).
    pub fn conflict_msg(group: &str, resource: &str, name: &str, why: &str) -> Self {
        Self::new(409, "Conflict", format!("Operation cannot be fulfilled on {} \"{name}\": {why}", qualified(group, resource))).with_details(named(group, resource, name))
    }

    /// 409 Conflict of a server-side apply: one `FieldManagerConflict` cause per field another
    /// manager owns.
    pub fn apply_conflict(message: impl Into<String>, causes: Vec<StatusCause>) -> Self {
        Self::new(409, "Conflict", message).with_details(StatusDetails { causes, ..Default::default() })
    }

    /// 401: credentials no authenticator accepts (upstream's Status, with no details).
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    /// 403 Forbidden (e.g. creating in a terminating namespace).
    pub fn forbidden(group: &str, resource: &str, name: &str, why: &str) -> Self {
        Self::new(403, "Forbidden", format!("{} \"{name}\" is forbidden: {why}", qualified(group, resource))).with_details(named(group, resource, name))
    }

    /// 403 Forbidden with a message already worded (the authorizer's, naming the user and what
    /// was asked); the details name the resource and object, empty for a non-resource path.
    pub fn forbidden_worded(group: &str, resource: &str, name: &str, message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message).with_details(named(group, resource, name))
    }

    /// 410 Expired, with an optional inconsistent continue token in `metadata.continue`.
    pub fn expired(message: impl Into<String>, continue_token: Option<String>) -> Self {
        let mut e = Self::new(410, "Expired", message);
        e.continue_token = continue_token;
        e
    }

    /// 413 RequestEntityTooLarge for a body past `limit` bytes, worded as upstream.
    pub fn too_large(limit: usize) -> Self {
        Self::too_large_message(format!("limit is {limit}"))
    }

    /// 413 RequestEntityTooLarge with upstream's message for what was too large.
    pub fn too_large_message(message: impl Into<String>) -> Self {
        Self::new(413, "RequestEntityTooLarge", format!("Request entity too large: {}", message.into()))
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(415, "UnsupportedMediaType", format!("the body of the request was in an unknown format - accepted media types include: application/json, application/vnd.kubernetes.protobuf (got {content_type:?})"))
    }

    /// 422 Invalid with field causes.
    pub fn invalid(group: &str, kind: &str, name: &str, causes: Vec<StatusCause>) -> Self {
        let summary: Vec<String> = causes.iter().map(|c| if c.field.is_empty() { c.message.clone() } else { format!("{}: {}", c.field, c.message) }).collect();
        let gk = if group.is_empty() { kind.to_owned() } else { format!("{kind}.{group}") };
        let message = match summary.len() {
            1 => format!("{gk} \"{name}\" is invalid: {}", summary[0]),
            _ => format!("{gk} \"{name}\" is invalid: [{}]", summary.join(", ")),
        };
        Self::new(422, "Invalid", message).with_details(StatusDetails { name: name.to_owned(), group: group.to_owned(), kind: kind.to_owned(), causes, ..Default::default() })
    }

    /// 422 Invalid without field causes (a JSON patch that does not apply).
    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(422, "Invalid", message)
    }

    /// 429 TooManyRequests with causes (a disruption budget's refusal); a `retry_after` of 0
    /// sends none.
    pub fn too_many_requests_with(message: impl Into<String>, retry_after: u64, causes: Vec<StatusCause>) -> Self {
        Self::new(429, "TooManyRequests", message).with_details(StatusDetails { retry_after_seconds: (retry_after > 0).then_some(retry_after), causes, ..Default::default() })
    }

    /// A failure with `code` and no reason: a Status an endpoint answers as its result (an
    /// eviction of a pod under two budgets: 500).
    pub fn failure(code: u16, message: impl Into<String>) -> Self {
        Self::new(code, "", message)
    }

    /// 429 TooManyRequests.
    pub fn too_many_requests(message: impl Into<String>, retry_after: u64) -> Self {
        Self::new(429, "TooManyRequests", message).with_details(StatusDetails { retry_after_seconds: Some(retry_after), ..Default::default() })
    }

    /// A 500 for an error upstream's REST layer does not classify (not a `Status` error: a
    /// failed dial to a kubelet), as its `ErrorToAPIStatus` writes it: no reason, the error's
    /// own text.
    pub fn unclassified(message: impl Into<String>) -> Self {
        Self::new(500, "", message)
    }

    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> Self {
        let m = message.into();
        Self::new(500, "InternalError", format!("Internal error occurred: {m}"))
            .with_details(StatusDetails { causes: vec![StatusCause { reason: String::new(), message: m, field: String::new() }], ..Default::default() })
    }

    /// 503 ServiceUnavailable.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(503, "ServiceUnavailable", message)
    }

    /// 504 Timeout for a resourceVersion newer than the cache reached in time.
    pub fn too_large_resource_version(requested: u64, current: u64) -> Self {
        Self::new(504, "Timeout", format!("Timeout: Too large resource version: {requested}, current: {current}")).with_details(StatusDetails {
            causes: vec![StatusCause { reason: "ResourceVersionTooLarge".into(), message: "Too large resource version".into(), field: String::new() }],
            retry_after_seconds: Some(1),
            ..Default::default()
        })
    }

    /// 504 Timeout with a message.
    pub fn timeout(message: impl Into<String>) -> Self {
        Self::new(504, "Timeout", message).with_details(StatusDetails { retry_after_seconds: Some(1), ..Default::default() })
    }

    /// 421 with reason `NotOwned`: the key's hash is outside this shard's ranges. Not an upstream
    /// reason: only routers see it, and they refresh their range map and retry.
    pub fn not_owned(key: &str, hash: u64, ranges: &str, epoch: u64) -> Self {
        Self::new(421, "NotOwned", format!("object key {key:?} (hash 0x{hash:016x}) is not in this shard's ranges {ranges} (epoch {epoch})"))
            .with_details(StatusDetails { name: key.to_owned(), kind: "shardRange".into(), causes: vec![StatusCause { reason: "RangeEpoch".into(), message: epoch.to_string(), field: String::new() }], ..Default::default() })
    }

    /// 421 with reason `NotOwned`: the request was routed under range-map epoch `sent`, older than
    /// this shard's `epoch`; the router must refresh its map and route again.
    pub fn stale_range_map(sent: u64, epoch: u64) -> Self {
        Self::new(421, "NotOwned", format!("the request was routed under range map epoch {sent}; this shard is at epoch {epoch}"))
            .with_details(StatusDetails { kind: "shardRange".into(), causes: vec![StatusCause { reason: "RangeEpoch".into(), message: epoch.to_string(), field: String::new() }], ..Default::default() })
    }

    /// The shard's epoch in a `NotOwned` Status body, if it is one.
    pub fn refusal_epoch(body: &Value) -> Option<u64> {
        if body["reason"] != "NotOwned" {
            return None;
        }
        body.pointer("/details/causes")?.as_array()?.iter().find(|c| c["reason"] == "RangeEpoch")?["message"].as_str()?.parse().ok()
    }

    /// The `Status` object as JSON.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(&StatusBody {
            kind: "Status",
            api_version: "v1",
            metadata: StatusMeta { continue_token: self.continue_token.as_deref() },
            status: "Failure",
            message: &self.message,
            reason: self.reason,
            details: self.details.as_ref(),
            code: self.code,
        })
        .expect("Status serializes")
    }

    /// The `Status` object as a JSON value.
    pub fn to_value(&self) -> Value {
        serde_json::from_slice(&self.to_json()).expect("Status is JSON")
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

/// A cause for [`ApiError::invalid`].
pub fn cause(reason: &str, field: &str, message: impl Into<String>) -> StatusCause {
    StatusCause { reason: reason.to_owned(), message: message.into(), field: field.to_owned() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conflict_matches_upstream_bytes() {
        let got = String::from_utf8(ApiError::conflict("", "pods", "foo").to_json()).unwrap();
        assert_eq!(
            got,
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Operation cannot be fulfilled on pods \"foo\": the object has been modified; please apply your changes to the latest version and try again","reason":"Conflict","details":{"name":"foo","kind":"pods"},"code":409}"#
        );
    }

    #[test]
    fn not_found_for_grouped_resource() {
        let e = ApiError::not_found("apps", "deployments", "web");
        assert_eq!(e.message, "deployments.apps \"web\" not found");
        assert_eq!(e.to_value()["details"]["group"], "apps");
    }
}
