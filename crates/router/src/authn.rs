//! Authentication at the router, where clients connect (RFC 0012): every request is named by
//! [`Authenticator`] from the client certificate its connection verified and its
//! `Authorization` header, and the user travels on as a request extension; bad credentials are
//! upstream's 401. The header is removed once read, so a bearer token goes no further.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, Response};
use axum::middleware::Next;
use shardplane_apimachinery::ApiError;
use shardplane_http::serve::ClientCertificates;
use shardplane_identity::authn::Authenticator;
use std::sync::Arc;

/// The middleware: names the request's user or refuses it.
pub async fn authenticate(State(auth): State<Arc<Authenticator>>, mut req: Request, next: Next) -> Response<Body> {
    let certs = req.extensions().get::<ClientCertificates>().cloned();
    let authorization = req.headers().get(header::AUTHORIZATION).map(|v| v.to_str().unwrap_or("\u{0}"));
    match auth.authenticate(certs.as_ref().and_then(|c| c.0.first()), authorization) {
        Ok(user) => {
            req.headers_mut().remove(header::AUTHORIZATION);
            req.extensions_mut().insert(user);
            next.run(req).await
        }
        Err(_) => shardplane_http::body::error(&ApiError::unauthorized()),
    }
}
