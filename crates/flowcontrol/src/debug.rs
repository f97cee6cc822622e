//! `/debug/api_priority_and_fairness/dump_*`: the gate's levels, queues and waiting requests as
//! upstream's text tables, served by the router and every shard.

use crate::gate::Gate;
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderValue, Response, StatusCode};
use axum::routing::get;
use axum::Router;
use std::sync::Arc;

/// Where the dumps are served.
pub const PREFIX: &str = "/debug/api_priority_and_fairness";

fn text(s: String) -> Response<Body> {
    let mut r = Response::new(Body::from(s));
    *r.status_mut() = StatusCode::OK;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

/// The three dumps' routes over `gate`, for any server's router.
pub fn routes<S: Clone + Send + Sync + 'static>(gate: Arc<Gate>) -> Router<S> {
    Router::new()
        .route(&format!("{PREFIX}/dump_priority_levels"), get(|State(g): State<Arc<Gate>>| async move { text(g.dump_priority_levels()) }))
        .route(&format!("{PREFIX}/dump_queues"), get(|State(g): State<Arc<Gate>>| async move { text(g.dump_queues()) }))
        .route(&format!("{PREFIX}/dump_requests"), get(|State(g): State<Arc<Gate>>| async move { text(g.dump_requests()) }))
        .with_state(gate)
}
