//! ServiceAccount tokens at the router, which holds the signing key (RFC 0012):
//! `TokenRequest` (`POST …/serviceaccounts/{name}/token`, what `kubectl create token` and the
//! kubelet ask), `TokenReview` (is this token good, and whose is it?), and the issuer's OIDC
//! discovery documents (`/.well-known/openid-configuration`, `/openid/v1/jwks`).

use crate::authn::Authentication;
use crate::state::RouterState;
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderValue, Response, StatusCode};
use serde_json::{json, Value};
use shardplane_apimachinery::kind_rules::errors as field;
use shardplane_apimachinery::{meta, ApiError};
use shardplane_http::{body, RequestContext};
use shardplane_identity::service_accounts::{Bound, Named, Tokens};
use std::sync::Arc;

/// Where the review is created, and the issuer's documents.
pub const TOKEN_REVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";
pub const OPENID_CONFIGURATION: &str = "/.well-known/openid-configuration";
pub const JWKS: &str = "/openid/v1/jwks";

/// A token's lifetime when the request names none, and the shortest one may ask (upstream's).
const DEFAULT_EXPIRATION: u64 = 3600;
const MIN_EXPIRATION: u64 = 600;
const MAX_EXPIRATION: u64 = 1 << 32;

const GROUP: &str = "authentication.k8s.io";

fn strings(v: &Value) -> Vec<String> {
    v.as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect()).unwrap_or_default()
}

/// `TokenRequest` for ServiceAccount `name` of `namespace`: a token signed for the spec's
/// audiences (the API's by default), expiring after `expirationSeconds` (an hour by default,
/// ten minutes at least), bound to the Pod, Secret or Node the spec names, which must exist
/// (with the UID given, if any).
pub async fn token_request(tokens: &Tokens, shards: &RouterState, ctx: &RequestContext, namespace: &str, name: &str) -> Result<Response<Body>, ApiError> {
    const KIND: &str = "TokenRequest";
    let mut request = crate::reviews::read(ctx, KIND)?;
    let spec = &request["spec"];
    let expiration = match &spec["expirationSeconds"] {
        Value::Null => DEFAULT_EXPIRATION,
        v => v.as_u64().ok_or_else(|| ApiError::invalid(GROUP, KIND, name, vec![field::invalid("spec.expirationSeconds", v, "may not specify a duration less than 10 minutes")]))?,
    };
    if expiration < MIN_EXPIRATION {
        return Err(ApiError::invalid(GROUP, KIND, name, vec![field::invalid("spec.expirationSeconds", &json!(expiration), "may not specify a duration less than 10 minutes")]));
    }
    if expiration > MAX_EXPIRATION {
        return Err(ApiError::invalid(GROUP, KIND, name, vec![field::invalid("spec.expirationSeconds", &json!(expiration), "may not specify a duration larger than 2^32 seconds")]));
    }
    let audiences = strings(&spec["audiences"]);
    let sa = shards.core_object("serviceaccounts", namespace, name).await?.ok_or_else(|| ApiError::not_found("", "serviceaccounts", name))?;
    let sa_uid = sa["metadata"]["uid"].as_str().unwrap_or("").to_owned();
    let bound = match spec["boundObjectRef"].as_object() {
        None => None,
        Some(r) => {
            let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
            let (kind, bound_name, want_uid) = (s("kind"), s("name"), s("uid"));
            let (plural, ns) = match kind.as_str() {
                "Pod" => ("pods", namespace),
                "Secret" => ("secrets", namespace),
                "Node" => ("nodes", ""),
                other => return Err(ApiError::invalid(GROUP, KIND, name, vec![field::not_supported("spec.boundObjectRef.kind", other, &["Pod", "Secret", "Node"])])),
            };
            let obj = shards.core_object(plural, ns, &bound_name).await?.ok_or_else(|| ApiError::not_found("", plural, &bound_name))?;
            let uid = obj["metadata"]["uid"].as_str().unwrap_or("").to_owned();
            if !want_uid.is_empty() && want_uid != uid {
                let why = format!("the UID in the bound object reference ({want_uid}) does not match the UID in record. The object might have been deleted and then recreated");
                return Err(ApiError::conflict_msg("", &kind, &bound_name, &why));
            }
            request["spec"]["boundObjectRef"]["uid"] = json!(uid);
            let named = Named { name: bound_name, uid };
            Some(match kind.as_str() {
                "Pod" => Bound::Pod(named),
                "Secret" => Bound::Secret(named),
                _ => Bound::Node(named),
            })
        }
    };
    let (token, expires) = tokens.issue(namespace, name, &sa_uid, &audiences, expiration, bound).map_err(ApiError::internal)?;
    request["apiVersion"] = json!("authentication.k8s.io/v1");
    request["kind"] = json!(KIND);
    request["metadata"] = json!({"name": name, "namespace": namespace, "creationTimestamp": meta::now_rfc3339()});
    request["spec"]["audiences"] = json!(if audiences.is_empty() { tokens.api_audiences.clone() } else { audiences });
    request["spec"]["expirationSeconds"] = json!(expiration);
    request["status"] = json!({"token": token, "expirationTimestamp": meta::rfc3339_at(expires)});
    Ok(body::json_value(StatusCode::CREATED, &request))
}

/// `TokenReview`: who the spec's token names, for its audiences, as the router would
/// authenticate it (a ServiceAccount token only while its objects exist).
pub async fn token_review(State(auth): State<Arc<Authentication>>, ctx: RequestContext) -> shardplane_http::Reply {
    const KIND: &str = "TokenReview";
    let mut review = crate::reviews::read(&ctx, KIND)?;
    let token = review["spec"]["token"].as_str().unwrap_or("").to_owned();
    if token.is_empty() {
        return Err(ApiError::bad_request("token is required for TokenReview in authentication").into());
    }
    let audiences = strings(&review["spec"]["audiences"]);
    let outcome = match auth.authenticator.token(&token, &audiences) {
        Ok((who, valid_for)) => auth.settle(who).await.map(|u| (u, valid_for)),
        Err(why) => Err(why),
    };
    review["status"] = match outcome {
        Ok((user, valid_for)) => {
            json!({"authenticated": true, "user": user.to_json(), "audiences": valid_for})
        }
        Err(why) => json!({"user": {}, "error": why}),
    };
    review["apiVersion"] = json!("authentication.k8s.io/v1");
    review["kind"] = json!(KIND);
    review["metadata"] = json!({"creationTimestamp": null});
    Ok(body::json_value(StatusCode::CREATED, &review))
}

/// The issuer's keys, when the router has them.
fn issuer(auth: &Authentication) -> Result<&Tokens, ApiError> {
    auth.authenticator.service_accounts.as_deref().ok_or_else(ApiError::path_not_found)
}

/// `/.well-known/openid-configuration`: the issuer and where its keys are (on this router, at
/// the address the caller used).
pub async fn openid_configuration(State(auth): State<Arc<Authentication>>, uri: axum::http::Uri, ctx: RequestContext) -> shardplane_http::Reply {
    let tokens = issuer(&auth)?;
    // HTTP/2 names the host in the URI's authority, HTTP/1.1 in the Host header.
    let host = uri.authority().map(|a| a.as_str().to_owned()).unwrap_or_else(|| ctx.header(header::HOST).to_owned());
    Ok(body::json_value(StatusCode::OK, &tokens.openid_configuration(&format!("https://{host}{JWKS}"))))
}

/// `/openid/v1/jwks`: the key ServiceAccount tokens are verified with.
pub async fn jwks(State(auth): State<Arc<Authentication>>) -> shardplane_http::Reply {
    let mut r = body::json_value(StatusCode::OK, &issuer(&auth)?.jwks());
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/jwk-set+json"));
    Ok(r)
}
