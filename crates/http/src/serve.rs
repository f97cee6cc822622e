//! Serving a router's routes on a TCP listener with the connection-level time bounds upstream's
//! server has and axum's `serve` does not set: a client must send a request's headers within
//! [`ConnectionLimits::header_read`] of starting it (a connection that sends part of a request
//! line and then nothing is closed, instead of holding a task and a socket forever), and
//! connections left idle between requests are closed the same way. Shutdown stops accepting,
//! lets every connection finish the request it is serving, and waits at most
//! [`ConnectionLimits::drain`] for them.
//!
//! Over TLS ([`serve_tls`], RFC 0012) the handshake has the same bound, HTTP/2 and HTTP/1.1 are
//! both served (as ALPN chose), and the client certificates the handshake verified travel with
//! every request of the connection as [`ClientCertificates`], for authentication to read.

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use rustls::pki_types::CertificateDer;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
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

/// The most HTTP/2 streams one connection may have open at once.
pub const MAX_STREAMS_PER_CONNECTION: u32 = 1000;

/// The certificate chain a TLS client presented and the handshake verified against the client
/// CA (leaf first); absent on plain connections and for clients that sent none.
#[derive(Clone, Debug)]
pub struct ClientCertificates(pub Arc<Vec<CertificateDer<'static>>>);

/// The address a request's connection comes from (a request extension).
#[derive(Clone, Copy, Debug)]
pub struct PeerAddr(pub std::net::SocketAddr);

/// Serves `app` on `listener` until `shutdown`, over plain HTTP/1.1.
pub async fn serve(listener: TcpListener, app: Router, limits: ConnectionLimits, shutdown: CancellationToken) -> std::io::Result<()> {
    serve_with(listener, app, None, limits, shutdown).await
}

/// Serves `app` on `listener` until `shutdown`, over TLS with `tls`.
pub async fn serve_tls(listener: TcpListener, app: Router, tls: Arc<rustls::ServerConfig>, limits: ConnectionLimits, shutdown: CancellationToken) -> std::io::Result<()> {
    serve_with(listener, app, Some(tokio_rustls::TlsAcceptor::from(tls)), limits, shutdown).await
}

async fn serve_with(listener: TcpListener, app: Router, tls: Option<tokio_rustls::TlsAcceptor>, limits: ConnectionLimits, shutdown: CancellationToken) -> std::io::Result<()> {
    let mut http = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    http.http1().timer(TokioTimer::new()).header_read_timeout(limits.header_read);
    // Upstream's --http2-max-streams-per-connection default; each stream still takes a seat.
    http.http2().timer(TokioTimer::new()).keep_alive_interval(Some(limits.header_read)).max_concurrent_streams(MAX_STREAMS_PER_CONNECTION);
    if tls.is_none() {
        // Plain connections speak HTTP/1.1 only, as upstream's (no cleartext HTTP/2).
        http = http.http1_only();
    }
    let http = Arc::new(http);
    let graceful = GracefulShutdown::new();
    loop {
        let (stream, peer) = tokio::select! {
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
        // Watched from its accept, so shutdown waits for a connection still in its handshake.
        let (app, http, watcher, tls) = (app.clone(), http.clone(), graceful.watcher(), tls.clone());
        tokio::spawn(async move {
            match tls {
                None => serve_connection(TokioIo::new(stream), app, peer, None, &http, watcher).await,
                Some(acceptor) => {
                    let Some(stream) = handshake(acceptor, stream, limits.header_read).await else { return };
                    let certs = stream.get_ref().1.peer_certificates().map(|c| ClientCertificates(Arc::new(c.iter().map(|c| c.clone().into_owned()).collect())));
                    serve_connection(TokioIo::new(stream), app, peer, certs, &http, watcher).await;
                }
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.drain, graceful.shutdown()).await.is_err() {
        tracing::info!("connections still open at shutdown were closed");
    }
    Ok(())
}

/// The TLS handshake, bounded as a request's headers are; a client that fails it or takes too
/// long ends only its own connection.
async fn handshake(acceptor: tokio_rustls::TlsAcceptor, stream: TcpStream, bound: Duration) -> Option<tokio_rustls::server::TlsStream<TcpStream>> {
    match tokio::time::timeout(bound, acceptor.accept(stream)).await {
        Ok(Ok(s)) => Some(s),
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "TLS handshake failed");
            None
        }
        Err(_) => {
            tracing::debug!("TLS handshake took too long");
            None
        }
    }
}

async fn serve_connection<I>(io: TokioIo<I>, app: Router, peer: std::net::SocketAddr, certs: Option<ClientCertificates>, http: &hyper_util::server::conn::auto::Builder<TokioExecutor>, watcher: hyper_util::server::graceful::Watcher)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        req.extensions_mut().insert(PeerAddr(peer));
        if let Some(c) = &certs {
            req.extensions_mut().insert(c.clone());
        }
        app.clone().oneshot(req)
    });
    let conn = watcher.watch(http.serve_connection(io, service).into_owned());
    // A client that goes away or breaks the protocol ends only its own connection.
    if let Err(e) = conn.await {
        tracing::debug!(error = %e, "connection ended with an error");
    }
}
