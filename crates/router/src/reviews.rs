//! The access reviews of authorization.k8s.io/v1, answered by the router's authorizer
//! ([`crate::authz`]) as upstream's are: `SelfSubjectAccessReview` (`kubectl auth can-i`), the
//! `SubjectAccessReview` a component asks about another user, the namespaced
//! `LocalSubjectAccessReview`, and `SelfSubjectRulesReview` (`kubectl auth can-i --list`).
//! None is stored: each answers with the review it was sent and its status (201).

use crate::authz::Authorizer;
use axum::extract::{Path, State};
use axum::body::Body;
use axum::http::{Response, StatusCode};
use axum::Extension;
use serde_json::{json, Value};
use shardplane_apimachinery::kind_rules::errors as field;
use shardplane_apimachinery::ApiError;
use shardplane_http::RequestContext;
use shardplane_identity::rbac::{Attributes, PolicyRule};
use shardplane_identity::user::UserInfo;
use std::sync::Arc;

/// Where the reviews are created.
pub const SELF_SUBJECT_ACCESS: &str = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
pub const SUBJECT_ACCESS: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
pub const LOCAL_SUBJECT_ACCESS: &str = "/apis/authorization.k8s.io/v1/namespaces/{namespace}/localsubjectaccessreviews";
pub const SELF_SUBJECT_RULES: &str = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews";

const GROUP: &str = "authorization.k8s.io";

type Answer = shardplane_http::Reply;

fn caller(user: Option<Extension<UserInfo>>) -> UserInfo {
    user.map_or_else(shardplane_identity::authn::anonymous, |Extension(u)| u)
}

/// The review (or request) sent, as JSON (or protobuf), which must be of `kind` or say none.
pub(crate) fn read(ctx: &RequestContext, kind: &str) -> Result<Value, ApiError> {
    // A review has no metadata to show as a Table or PartialObjectMetadata: JSON only (406
    // otherwise, as upstream answers for a kind without object metadata).
    if shardplane_http::negotiation::negotiate(&ctx.headers) != Some(shardplane_http::negotiation::Representation::Json) {
        return Err(ApiError::not_acceptable(ctx.header(axum::http::header::ACCEPT)));
    }
    let review = shardplane_http::body::decode_object(&ctx.headers, &ctx.body)?;
    if !review.is_object() {
        return Err(ApiError::bad_request(format!("the body is not a {kind}")));
    }
    if review["kind"].as_str().is_some_and(|k| !k.is_empty() && k != kind) {
        return Err(ApiError::bad_request(format!("not a {kind}: {}", review["kind"])));
    }
    Ok(review)
}

/// The attributes a review's spec asks about, with upstream's validation (exactly one of
/// resource and non-resource attributes).
fn attributes(kind: &str, spec: &Value) -> Result<Attributes, ApiError> {
    let (resource, non_resource) = (&spec["resourceAttributes"], &spec["nonResourceAttributes"]);
    let s = |v: &Value, k: &str| v[k].as_str().unwrap_or("").to_owned();
    match (resource.is_object(), non_resource.is_object()) {
        (true, false) => Ok(Attributes::resource(&s(resource, "verb"), &s(resource, "group"), &s(resource, "resource"), &s(resource, "subresource"), &s(resource, "namespace"), &s(resource, "name"))),
        (false, true) => Ok(Attributes::non_resource(&s(non_resource, "verb"), &s(non_resource, "path"))),
        (both, _) => {
            let detail = if both { "cannot be specified in combination with resourceAttributes" } else { "exactly one of nonResourceAttributes or resourceAttributes must be specified" };
            let cause = if both { field::invalid_shown("spec.nonResourceAttributes", &go_struct(non_resource), detail) } else { field::invalid_shown("spec.resourceAttributes", "null", detail) };
            Err(ApiError::invalid(GROUP, kind, "", vec![cause]))
        }
    }
}

/// A non-resource attributes value as Go's `%#v` of the pointer prints it (the rare mistake of
/// sending both; the value is the address, which upstream prints and no client reads).
fn go_struct(v: &Value) -> String {
    format!("&v1.NonResourceAttributes{{Path:{:?}, Verb:{:?}}}", v["path"].as_str().unwrap_or(""), v["verb"].as_str().unwrap_or(""))
}

/// The review answered: what was sent, with its status.
fn answered(mut review: Value, kind: &str, status: Value) -> Response<Body> {
    review["apiVersion"] = json!("authorization.k8s.io/v1");
    review["kind"] = json!(kind);
    if !review["metadata"].is_object() {
        review["metadata"] = json!({});
    }
    if review["metadata"].get("creationTimestamp").is_none() {
        review["metadata"]["creationTimestamp"] = Value::Null;
    }
    review["status"] = status;
    shardplane_http::body::json_value(StatusCode::CREATED, &review)
}

async fn access_status(authz: &Authorizer, user: &UserInfo, attrs: &Attributes) -> Result<Value, ApiError> {
    let decision = authz.decide(user, attrs).await?;
    let mut status = json!({"allowed": decision.allowed()});
    if !decision.reason().is_empty() {
        status["reason"] = json!(decision.reason());
    }
    Ok(status)
}

/// `SelfSubjectAccessReview`: may the caller do what the spec asks?
pub async fn self_subject_access(State(authz): State<Arc<Authorizer>>, user: Option<Extension<UserInfo>>, ctx: RequestContext) -> Answer {
    const KIND: &str = "SelfSubjectAccessReview";
    let review = read(&ctx, KIND)?;
    let attrs = attributes(KIND, &review["spec"])?;
    let status = access_status(&authz, &caller(user), &attrs).await?;
    Ok(answered(review, KIND, status))
}

/// The user a `SubjectAccessReview`'s spec names (its user, UID and groups as given: the caller
/// vouches for them).
fn named_user(kind: &str, spec: &Value) -> Result<UserInfo, ApiError> {
    let strings = |k: &str| spec[k].as_array().map(|a| a.iter().filter_map(|g| g.as_str().map(str::to_owned)).collect::<Vec<_>>()).unwrap_or_default();
    let user = UserInfo { name: spec["user"].as_str().unwrap_or("").to_owned(), uid: spec["uid"].as_str().unwrap_or("").to_owned(), groups: strings("groups"), extra: extra(&spec["extra"]) };
    if user.name.is_empty() && user.groups.is_empty() {
        return Err(ApiError::invalid(GROUP, kind, "", vec![field::invalid_shown("spec.user", "\"\"", "at least one of user or group must be specified")]));
    }
    Ok(user)
}

/// A review's `extra`: each key's values.
fn extra(v: &Value) -> std::collections::BTreeMap<String, Vec<String>> {
    v.as_object().map(|o| o.iter().map(|(k, vs)| (k.clone(), vs.as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect()).unwrap_or_default())).collect()).unwrap_or_default()
}

/// `SubjectAccessReview`: may the user the spec names do what it asks?
pub async fn subject_access(State(authz): State<Arc<Authorizer>>, ctx: RequestContext) -> Answer {
    const KIND: &str = "SubjectAccessReview";
    let review = read(&ctx, KIND)?;
    let attrs = attributes(KIND, &review["spec"])?;
    let status = access_status(&authz, &named_user(KIND, &review["spec"])?, &attrs).await?;
    Ok(answered(review, KIND, status))
}

/// `LocalSubjectAccessReview`: a SubjectAccessReview within the path's namespace.
pub async fn local_subject_access(State(authz): State<Arc<Authorizer>>, Path(namespace): Path<String>, ctx: RequestContext) -> Answer {
    const KIND: &str = "LocalSubjectAccessReview";
    let mut review = read(&ctx, KIND)?;
    let spec = &review["spec"];
    let attrs = attributes(KIND, spec)?;
    if !attrs.resource_request {
        return Err(ApiError::invalid(GROUP, KIND, "", vec![field::invalid_shown("spec.nonResourceAttributes", &go_struct(&spec["nonResourceAttributes"]), "disallowed on this kind of request")]).into());
    }
    if attrs.namespace != namespace {
        return Err(ApiError::bad_request(format!("spec.resourceAttributes.namespace must match namespace: {}", namespace)).into());
    }
    let user = named_user(KIND, spec)?;
    let status = access_status(&authz, &user, &attrs).await?;
    if review["metadata"]["namespace"].as_str().unwrap_or("").is_empty() {
        review["metadata"]["namespace"] = json!(namespace);
    }
    Ok(answered(review, KIND, status))
}

/// `SelfSubjectRulesReview`: every rule the caller holds in the spec's namespace.
pub async fn self_subject_rules(State(authz): State<Arc<Authorizer>>, user: Option<Extension<UserInfo>>, ctx: RequestContext) -> Answer {
    const KIND: &str = "SelfSubjectRulesReview";
    let review = read(&ctx, KIND)?;
    let namespace = review["spec"]["namespace"].as_str().unwrap_or("").to_owned();
    let (rules, errors) = authz.rules_for(&caller(user), &namespace).await?;
    let (resource, paths): (Vec<&PolicyRule>, Vec<&PolicyRule>) = rules.iter().partition(|r| r.non_resource_urls.is_empty());
    let resource_rules: Vec<Value> = resource.iter().map(|r| json!({"verbs": r.verbs, "apiGroups": r.api_groups, "resources": r.resources, "resourceNames": (!r.resource_names.is_empty()).then_some(&r.resource_names)})).map(drop_nulls).collect();
    let non_resource_rules: Vec<Value> = paths.iter().map(|r| json!({"verbs": r.verbs, "nonResourceURLs": r.non_resource_urls})).collect();
    let mut status = json!({"resourceRules": resource_rules, "nonResourceRules": non_resource_rules, "incomplete": !errors.is_empty()});
    if !errors.is_empty() {
        status["evaluationError"] = json!(errors.join(", "));
    }
    Ok(answered(review, KIND, status))
}

fn drop_nulls(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        o.retain(|_, x| !x.is_null());
    }
    v
}
