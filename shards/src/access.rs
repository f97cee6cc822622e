//! Who may reach a shard (RFC 0012, "Inside the cluster"). A shard behind a router serves
//! HTTPS to that router alone: the handshake requires a client certificate the front proxy's CA
//! signed, its common name must be an allowed one, and only then are the router's headers
//! believed (the user it names, the range epoch, a generated name). A standalone shard-server
//! names its clients itself (client certificates, the token file) and serves anyone
//! authenticated, the health and version paths to anyone. Plain HTTP, served to anyone, takes
//! `--insecure-plain-http`.
//!
//! This module only decides who is calling; it never authorizes beyond that (a shard holds no
//! RBAC policy: the router decides, RFC 0012).

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, Response};
use axum::middleware::Next;
use shardplane_apimachinery::ApiError;
use shardplane_http::protocol::{EPOCH_HEADER, GENERATED_NAME_HEADER, LIST_FRAMING_HEADER};
use shardplane_http::serve::ClientCertificates;
use shardplane_identity::authn::{Authenticated, Authenticator};
use shardplane_identity::front_proxy;
use shardplane_identity::user::UserInfo;
use std::sync::Arc;

/// How a shard's port is reached, and by whom.
#[derive(Clone, Default)]
pub enum Access {
    /// Plain HTTP: anyone who reaches the port is served, the router's headers believed
    /// (`--insecure-plain-http`; tests and benchmarks on a machine of one's own).
    #[default]
    Insecure,
    /// HTTPS to the routers only: `tls` requires a client certificate the front proxy's CA
    /// signed, whose common name is one of `allowed_names` (any, when empty, as upstream's
    /// `--requestheader-allowed-names`).
    FrontProxy { tls: Arc<rustls::ServerConfig>, allowed_names: Vec<String> },
    /// HTTPS to clients it authenticates itself (a standalone shard-server).
    Clients { tls: Arc<rustls::ServerConfig>, authenticator: Arc<Authenticator> },
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Insecure => f.write_str("Insecure"),
            Self::FrontProxy { allowed_names, .. } => f.debug_struct("FrontProxy").field("allowed_names", allowed_names).finish(),
            Self::Clients { .. } => f.write_str("Clients"),
        }
    }
}

impl Access {
    /// The TLS configuration served, if any.
    pub fn tls(&self) -> Option<Arc<rustls::ServerConfig>> {
        match self {
            Self::Insecure => None,
            Self::FrontProxy { tls, .. } | Self::Clients { tls, .. } => Some(tls.clone()),
        }
    }

    /// `https` or `http`: how the shard's address is published.
    pub fn scheme(&self) -> &'static str {
        if self.tls().is_some() { "https" } else { "http" }
    }
}

/// The paths a standalone shard serves without credentials (what upstream's
/// `system:public-info-viewer` grants an anonymous caller).
const PUBLIC: [&str; 4] = ["/healthz", "/livez", "/readyz", "/version"];

/// The headers only a trusted router may send.
fn is_router_header(name: &str) -> bool {
    front_proxy::is_front_proxy_header(name) || name == EPOCH_HEADER || name == GENERATED_NAME_HEADER || name == LIST_FRAMING_HEADER
}

/// The middleware: names the caller, or refuses it with upstream's 401 (or 403 for an
/// anonymous caller outside the public paths).
pub async fn admit(State(access): State<Arc<Access>>, mut req: Request, next: Next) -> Response<Body> {
    let leaf = req.extensions().get::<ClientCertificates>().and_then(|c| c.0.first().cloned());
    let user = match &*access {
        // Anyone is believed: the user the router's headers name, if any.
        Access::Insecure => match named_by_router(&req) {
            Some(u) => u,
            None => return next.run(req).await,
        },
        Access::FrontProxy { allowed_names, .. } => {
            // The handshake verified the chain; the name is checked here, as upstream does.
            let Some(cn) = leaf.as_ref().and_then(front_proxy::common_name) else { return refuse() };
            if !allowed_names.is_empty() && !allowed_names.contains(&cn) {
                tracing::warn!(%cn, "a client certificate from the front proxy's CA with a name not allowed");
                return refuse();
            }
            match named_by_router(&req) {
                Some(u) => u,
                None => {
                    // The router's own requests (its shared watches, readiness) name no user:
                    // they are the router's, by its certificate, and name none further on
                    // (priority and fairness exempts them, RFC 0013).
                    tracing::Span::current().record("user", cn.as_str());
                    return next.run(req).await;
                }
            }
        }
        Access::Clients { authenticator, .. } => {
            let authorization = req.headers().get(header::AUTHORIZATION).map(|v| v.to_str().unwrap_or("\u{0}").to_owned());
            let user = match authenticator.authenticate(leaf.as_ref(), authorization.as_deref()) {
                Ok(Authenticated::User(u)) => u,
                // No ServiceAccount keys are given a standalone shard; a token it cannot check
                // for its objects is not taken.
                Ok(Authenticated::ServiceAccount(_)) | Err(_) => return refuse(),
            };
            let path = req.uri().path().trim_end_matches('/');
            if user.name == "system:anonymous" && !PUBLIC.contains(&path) {
                let attrs = shardplane_identity::rbac::request::attributes(req.method().as_str(), req.uri().path(), false, "");
                let message = shardplane_identity::rbac::forbidden_message(&user, &attrs, "");
                return shardplane_http::body::error(&ApiError::forbidden_worded(&attrs.api_group, &attrs.resource, &attrs.name, message));
            }
            req.headers_mut().remove(header::AUTHORIZATION);
            // A client is not a router: what only a router may say is not taken from it.
            let names: Vec<_> = req.headers().keys().filter(|n| is_router_header(n.as_str())).cloned().collect();
            for n in names {
                req.headers_mut().remove(n);
            }
            user
        }
    };
    tracing::Span::current().record("user", user.name.as_str());
    req.extensions_mut().insert(user);
    next.run(req).await
}

/// The user a router's front-proxy headers name, if they name one.
fn named_by_router(req: &Request) -> Option<UserInfo> {
    front_proxy::user(req.headers().iter().filter_map(|(n, v)| Some((n.as_str(), v.to_str().ok()?))))
}

fn refuse() -> Response<Body> {
    shardplane_http::body::error(&ApiError::unauthorized())
}
