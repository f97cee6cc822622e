//! Impersonation at the router (RFC 0012, "Impersonation"): after authentication names the
//! requester, a request with upstream's `Impersonate-*` headers acts as the user they name once
//! the requester passes an `impersonate` check for every part (the user or ServiceAccount, each
//! group, each extra value, the UID), decided by the same authorizer as every request. The
//! headers are removed once read, and the requester is kept as [`Impersonator`] for audit.

use crate::authz::{forbidden, Authorizer};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::Response;
use axum::middleware::Next;
use shardplane_apimachinery::ApiError;
use shardplane_identity::impersonation;
use shardplane_identity::user::UserInfo;
use std::sync::Arc;

/// The user who sent a request that acts as another (upstream's audit `user`, while the
/// request's [`UserInfo`] is the impersonated one).
#[derive(Clone, Debug)]
pub struct Impersonator(pub UserInfo);

/// The middleware: switches the request's user to the impersonated one, or refuses it (400 for
/// headers that name no user, 403 for the first part the requester may not impersonate).
pub async fn impersonate(State(authz): State<Arc<Authorizer>>, mut req: Request, next: Next) -> Response<Body> {
    let headers = req.headers();
    // A header value that is not visible ASCII names nothing that can be matched: read it as
    // unprintable so it is checked (and refused) rather than skipped.
    let pairs: Vec<(&str, &str)> = headers.iter().filter(|(n, _)| impersonation::is_impersonation_header(n.as_str())).map(|(n, v)| (n.as_str(), v.to_str().unwrap_or("\u{fffd}"))).collect();
    if pairs.is_empty() {
        return next.run(req).await;
    }
    let asked = match impersonation::requested(pairs) {
        Ok(Some(asked)) => asked,
        Ok(None) => return next.run(strip(req)).await,
        Err(message) => return shardplane_http::body::error(&ApiError::bad_request(message)),
    };
    let requester = req.extensions().get::<UserInfo>().cloned().unwrap_or_else(shardplane_identity::authn::anonymous);
    for check in &asked.checks {
        match authz.decide(&requester, check).await {
            Ok(d) if d.allowed() => {}
            Ok(d) => {
                tracing::debug!(user = %requester.name, as_user = %asked.user.name, "impersonation refused");
                return shardplane_http::body::error(&forbidden(&requester, check, d.reason()));
            }
            Err(e) => return shardplane_http::body::error(&e),
        }
    }
    tracing::debug!(user = %requester.name, as_user = %asked.user.name, "acting as another user");
    req = strip(req);
    if let Some(r) = req.extensions().get::<crate::audit::Recorder>() {
        r.impersonated(&asked.user);
    }
    req.extensions_mut().insert(asked.user);
    req.extensions_mut().insert(Impersonator(requester));
    next.run(req).await
}

/// The request without its impersonation headers, so they go no further.
fn strip(mut req: Request) -> Request {
    let names: Vec<_> = req.headers().keys().filter(|n| impersonation::is_impersonation_header(n.as_str())).cloned().collect();
    for n in names {
        req.headers_mut().remove(n);
    }
    req
}
