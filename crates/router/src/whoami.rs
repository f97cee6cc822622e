//! `SelfSubjectReview` (authentication.k8s.io/v1, what `kubectl auth whoami` asks): the user
//! the router takes the caller to be. Identity is established here, where the client connects
//! (RFC 0012): today from the client certificate the TLS handshake verified (its CN the user,
//! each O a group); a caller without one is `system:anonymous`. Bearer tokens are not read yet
//! (RFC 0012 says what is left).

use axum::body::Body;
use axum::http::{Response, StatusCode};
use axum::Extension;
use serde_json::json;
use shardplane_http::serve::ClientCertificates;
use shardplane_identity::user::{from_client_certificate, UserInfo};

/// Where the review is created.
pub const PATH: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";

/// The user of a request made with `certs` (the verified chain, leaf first).
pub fn user_of(certs: Option<&ClientCertificates>) -> UserInfo {
    certs.and_then(|c| c.0.first()).and_then(from_client_certificate).unwrap_or_else(|| UserInfo { name: "system:anonymous".into(), uid: String::new(), groups: vec!["system:unauthenticated".into()] })
}

/// Answers a review with the caller's user, as upstream writes it (201, `uid` and `extra` left
/// out when empty).
pub async fn self_subject_review(certs: Option<Extension<ClientCertificates>>) -> Response<Body> {
    let user = user_of(certs.as_ref().map(|Extension(c)| c));
    let mut info = json!({"username": user.name, "groups": user.groups});
    if !user.uid.is_empty() {
        info["uid"] = json!(user.uid);
    }
    let review = json!({"kind": "SelfSubjectReview", "apiVersion": "authentication.k8s.io/v1", "metadata": {"creationTimestamp": null}, "status": {"userInfo": info}});
    shardplane_http::body::json_value(StatusCode::CREATED, &review)
}
