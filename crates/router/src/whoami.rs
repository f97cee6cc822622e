//! `SelfSubjectReview` (authentication.k8s.io/v1, what `kubectl auth whoami` asks): the user
//! the router took the caller to be ([`crate::authn`]: the verified client certificate, a token
//! of the token file, or no credential at all: `system:anonymous`).

use axum::body::Body;
use axum::http::{Response, StatusCode};
use axum::Extension;
use serde_json::json;
use shardplane_identity::user::UserInfo;

/// Where the review is created.
pub const PATH: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";

/// Answers a review with the caller's user, as upstream writes it (201, `uid` and `extra` left
/// out when empty).
pub async fn self_subject_review(user: Option<Extension<UserInfo>>) -> Response<Body> {
    let user = user.map_or_else(shardplane_identity::authn::anonymous, |Extension(u)| u);
    let review = json!({"kind": "SelfSubjectReview", "apiVersion": "authentication.k8s.io/v1", "metadata": {"creationTimestamp": null}, "status": {"userInfo": user.to_json()}});
    shardplane_http::body::json_value(StatusCode::CREATED, &review)
}
