//! Authentication at the router, where clients connect (RFC 0012): every request is named by
//! [`Authenticator`] from the client certificate its connection verified and its
//! `Authorization` header, and the user travels on as a request extension; bad credentials are
//! upstream's 401. The header is removed once read, so a bearer token goes no further.
//!
//! A ServiceAccount token is valid only while its ServiceAccount and the object it is bound to
//! exist with the UIDs it names: the router reads them from their shards, and keeps a token it
//! found valid for [`TOKEN_RECHECK`] before reading them again. So a token stops working at
//! most that long after its pod (or ServiceAccount, or Secret) is deleted.

use crate::state::RouterState;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, Response};
use axum::middleware::Next;
use shardplane_apimachinery::ApiError;
use shardplane_http::serve::ClientCertificates;
use shardplane_identity::authn::{Authenticated, Authenticator};
use shardplane_identity::service_accounts::Claims;
use shardplane_identity::user::UserInfo;
use std::sync::Arc;
use std::time::Duration;

/// How long a ServiceAccount token found valid is taken as valid without reading its objects
/// again.
pub const TOKEN_RECHECK: Duration = Duration::from_secs(5);

/// The most tokens remembered as valid.
const REMEMBERED_TOKENS: u64 = 10_000;

/// The authenticators and what ServiceAccount tokens are checked against.
pub struct Authentication {
    pub authenticator: Arc<Authenticator>,
    shards: Arc<RouterState>,
    /// ServiceAccount tokens found valid in the last [`TOKEN_RECHECK`], by their `jti` (each
    /// token's own, and the signature is verified before it is looked up), with their users.
    valid: moka::sync::Cache<String, UserInfo>,
    /// Where a refused request is recorded.
    auditor: Option<Arc<crate::audit::Auditor>>,
}

impl Authentication {
    pub fn new(authenticator: Arc<Authenticator>, shards: Arc<RouterState>, auditor: Option<Arc<crate::audit::Auditor>>) -> Self {
        Self { authenticator, shards, valid: moka::sync::Cache::builder().max_capacity(REMEMBERED_TOKENS).time_to_live(TOKEN_RECHECK).build(), auditor }
    }

    /// The user a credential names, once a ServiceAccount token's objects are found; `Err` says
    /// why not (TokenReview's `status.error`).
    pub async fn settle(&self, who: Authenticated) -> Result<UserInfo, String> {
        match who {
            Authenticated::User(u) => Ok(u),
            Authenticated::ServiceAccount(claims) => {
                if let Some(u) = self.valid.get(&claims.jti) {
                    return Ok(u);
                }
                check_objects(&self.shards, &claims).await?;
                let user = claims.user();
                self.valid.insert(claims.jti.clone(), user.clone());
                Ok(user)
            }
        }
    }
}

/// Whether a ServiceAccount token's ServiceAccount and bound object exist as it names them (not
/// being deleted, with the same UID), with upstream's reasons when not.
pub async fn check_objects(shards: &RouterState, claims: &Claims) -> Result<(), String> {
    for (plural, namespace, name, uid) in claims.lookups() {
        let singular = plural.trim_end_matches('s');
        let obj = shards.core_object(plural, &namespace, &name).await.map_err(|e| e.message)?.ok_or_else(|| format!("{plural} {name:?} not found"))?;
        let found = obj["metadata"]["uid"].as_str().unwrap_or("");
        if !uid.is_empty() && found != uid {
            return Err(format!("{singular} UID ({found}) does not match claim ({uid})"));
        }
        if plural != "serviceaccounts" && obj["metadata"]["deletionTimestamp"].is_string() {
            return Err(format!("{singular} {namespace}/{name} is being deleted"));
        }
    }
    Ok(())
}

/// The middleware: names the request's user or refuses it.
pub async fn authenticate(State(auth): State<Arc<Authentication>>, mut req: Request, next: Next) -> Response<Body> {
    let certs = req.extensions().get::<ClientCertificates>().cloned();
    let authorization = req.headers().get(header::AUTHORIZATION).map(|v| v.to_str().unwrap_or("\u{0}").to_owned());
    let named = match auth.authenticator.authenticate(certs.as_ref().and_then(|c| c.0.first()), authorization.as_deref()) {
        Ok(who) => auth.settle(who).await.map_err(|why| tracing::debug!(%why, "a ServiceAccount token is no longer valid")),
        Err(_) => Err(()),
    };
    match named {
        Ok(user) => {
            tracing::Span::current().record("user", user.name.as_str());
            req.headers_mut().remove(header::AUTHORIZATION);
            req.extensions_mut().insert(user);
            next.run(req).await
        }
        Err(()) => {
            if let Some(a) = &auth.auditor {
                let peer = req.extensions().get::<shardplane_http::serve::PeerAddr>().map(|p| p.0);
                a.unauthenticated(req.method().as_str(), req.uri(), req.headers(), peer).await;
            }
            shardplane_http::body::error(&ApiError::unauthorized())
        }
    }
}
