//! Serving a router's routes on a TCP listener with the connection-level time bounds upstream's
//! server has and axum's `serve` does not set: a client must send a request's headers within
//! [`ConnectionLimits::header_read`] of starting it (a connection that sends part of a request
//! line and then nothing is closed, instead of holding a task and a socket forever), and
//! connections left idle between requests are closed the same way. Shutdown stops accepting,
//! lets every connection finish the request it is serving, and waits at most
//! [`ConnectionLimits::drain`] for them.

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// Per-connection time bounds.
#[derive(Clone, Copy, Debug)]
pub struct ConnectionLimits {
    /// The longest a client may take to send a request's headers (upstream's Go server
    /// defaults give a slow client no more than this either).
    pub header_read: Duration,
    /// The longest shutdown waits for open connections to finish.
    pub drain: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self { header_read: Duration::from_secs(30), drain: Duration::from_secs(5) }
    }
}

/// Serves `app` on `listener` until `shutdown`.
pub async fn serve(listener: TcpListener, app: Router, limits: ConnectionLimits, shutdown: CancellationToken) -> std::io::Result<()> {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(limits.header_read);
    let graceful = GracefulShutdown::new();
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(s) => s,
                // Out of file descriptors and the like: wait a moment rather than spin.
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.cancelled() => break,
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| app.clone().oneshot(req));
        let conn = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            // A client that goes away or breaks the protocol ends only its own connection.
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.drain, graceful.shutdown()).await.is_err() {
        tracing::info!("connections still open at shutdown were closed");
    }
    Ok(())
}
