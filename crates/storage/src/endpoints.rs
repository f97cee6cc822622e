//! Which etcd member this process talks to, and when it moves to another (RFC 0016).
//!
//! etcd-client balances requests over every endpoint it is given and does not leave a dead one:
//! with one member of three down, about one request in three fails until the member returns. A
//! process here keeps one client per member and sends everything to one of them, as etcd's own
//! Go client prefers one endpoint while it works; when the member goes out of reach or loses its
//! leader, the process moves to the next member and tries the request again there, if trying
//! again is safe:
//!
//! - a request etcd certainly did not take (the connection could not be made, or the member
//!   refused it for want of a leader before proposing it) is tried again, read or write;
//! - a request whose fate is unknown (the connection broke while it was in flight, the member
//!   timed out waiting for a leader that changed) is tried again only when the caller can tell
//!   its own earlier attempt from someone else's write afterwards: reads, and the conditional
//!   writes of `Storage::commit`, which read the key's history when a repetition finds their
//!   condition gone (`Storage::took_effect`); other writes report the error.
//!
//! Every request carries etcd's "require leader" mark, so a member cut off from its peers
//! refuses requests and cancels watches as soon as it knows it has no leader, instead of
//! answering from a minority. A member that answers nothing at all is noticed by HTTP/2
//! keepalive and, when there is another member, by an attempt running out of time; one that
//! answers late (a slow disk) is left after a slow answer. Streams on a member the process
//! left end ([`Endpoints::left`]), so their readers open them again on the member in use.

use etcd_client::Client;
use std::future::Future;
use std::time::{Duration, Instant};

/// How long one request keeps trying other members before it reports the last error: longer
/// than an etcd election (about a second with etcd's default timings) plus the keepalive that
/// notices a silent member (interval + timeout of `Storage::connect`).
pub(crate) const RETRY_WINDOW: Duration = Duration::from_secs(15);
/// How long one attempt may take when there is another member to try: longer than a quorum
/// write or a linearizable read takes on a healthy cluster, shorter than the 7 s a follower
/// waits for a leader that died before it gives up on a request it forwarded. An attempt cut
/// short is of unknown fate, and tried again only where that is safe (see [`Repeat`]).
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(3);
/// An answer slower than this moves the requests that follow to the next member (when there is
/// one): a member whose disk is slow answers everything late, since it applies each change
/// before it answers, while its peers keep the quorum going. When every member is slow (a slow
/// leader), requests move round the members, which costs no more than staying.
const SLOW_ANSWER: Duration = Duration::from_secs(1);
/// The first pause between two attempts; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(25);
const MAX_PAUSE: Duration = Duration::from_millis(500);

/// One client per member, and the member in use.
pub(crate) struct Endpoints {
    clients: Vec<Client>,
    /// The member in use; watched by streams, which end when the process leaves their member.
    current: tokio::sync::watch::Sender<usize>,
}

/// What a failed request says about trying it again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// etcd did not take it: safe to send again anywhere.
    NotTaken,
    /// It may or may not have been applied.
    Unknown,
    /// An answer (a precondition, a compacted revision, a permission, a full store): final.
    Answered,
}

/// Whether a request may be tried again after [`Failure::Unknown`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Repeat {
    /// Reads and anything whose repetition the caller can tell apart.
    Safe,
    /// Writes that must not be sent twice without the caller knowing.
    OnlyIfNotTaken,
}

impl Endpoints {
    /// One client per member; the process starts on `first` (spreads processes over members).
    pub(crate) fn new(clients: Vec<Client>, first: usize) -> Self {
        assert!(!clients.is_empty(), "at least one member");
        let first = first % clients.len();
        Self { clients, current: tokio::sync::watch::Sender::new(first) }
    }

    /// The member in use and its client.
    pub(crate) fn current(&self) -> (usize, Client) {
        let i = *self.current.borrow();
        (i, self.clients[i].clone())
    }

    /// Moves off member `failed` (to the next one), unless another request already has.
    pub(crate) fn leave(&self, failed: usize) {
        let next = (failed + 1) % self.clients.len();
        let moved = self.current.send_if_modified(|now| {
            let leaving = *now == failed && next != failed;
            if leaving {
                *now = next;
            }
            leaving
        });
        if moved {
            tracing::warn!(from = failed, to = next, "moving to another etcd member");
        }
    }

    /// Resolves once the process no longer uses `member` (a stream reading from it then ends,
    /// and its reader opens it again on the member in use: a slow or partitioned member would
    /// otherwise keep feeding it late).
    pub(crate) async fn left(&self, member: usize) {
        let mut moves = self.current.subscribe();
        let _ = moves.wait_for(|now| *now != member).await;
    }

    /// Runs `request` on the member in use, moving to the next member and trying again while
    /// the failure allows (see [`Repeat`]) and [`RETRY_WINDOW`] lasts. Returns the answer and
    /// whether an earlier attempt's fate is unknown (the caller must then tell its own write
    /// from another's).
    pub(crate) async fn call<T, F, Fut>(&self, repeat: Repeat, mut request: F) -> Result<(T, bool), etcd_client::Error>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        self.call_on_member(repeat, |_, client| request(client)).await
    }

    /// [`Endpoints::call`], telling `request` which member it runs on (for a stream that must
    /// leave its member when it breaks later, see [`Endpoints::leave`]).
    pub(crate) async fn call_on_member<T, F, Fut>(&self, repeat: Repeat, mut request: F) -> Result<(T, bool), etcd_client::Error>
    where
        F: FnMut(usize, Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let began = Instant::now();
        let mut pause = FIRST_PAUSE;
        let mut unknown = false;
        loop {
            let (member, client) = self.current();
            let attempt = request(member, client);
            let sent = Instant::now();
            let answer = if self.clients.len() > 1 {
                let answer = tokio::time::timeout(ATTEMPT_TIMEOUT, attempt).await.unwrap_or_else(|_| Err(etcd_client::Error::GRpcStatus(tonic::Status::deadline_exceeded(format!("no answer within {ATTEMPT_TIMEOUT:?}")))));
                if answer.is_ok() && sent.elapsed() > SLOW_ANSWER {
                    // A member this slow (a slow disk: it must apply a change before it answers)
                    // is left for the requests that follow.
                    self.leave(member);
                }
                answer
            } else {
                attempt.await
            };
            let e = match answer {
                Ok(answer) => return Ok((answer, unknown)),
                Err(e) => e,
            };
            let failure = classify(&e);
            let again = match failure {
                Failure::Answered => false,
                Failure::NotTaken => true,
                Failure::Unknown => repeat == Repeat::Safe,
            };
            if failure != Failure::Answered {
                self.leave(member);
            }
            if !again || began.elapsed() + pause > RETRY_WINDOW {
                return Err(e);
            }
            unknown |= failure == Failure::Unknown;
            tracing::debug!(member, error = %e, "etcd request failed; trying again");
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_PAUSE);
        }
    }
}

/// What `e` says about trying its request again (see [`Failure`]).
pub(crate) fn classify(e: &etcd_client::Error) -> Failure {
    use etcd_client::Error as E;
    match e {
        // Failed before a request existed (building the connection).
        E::TransportError(_) | E::IoError(_) => Failure::NotTaken,
        E::GRpcStatus(status) => classify_status(status.code(), status.message()),
        // The watch and keepalive streams' own errors: the stream broke.
        E::WatchError(_) | E::LeaseKeepAliveError(_) => Failure::Unknown,
        _ => Failure::Answered,
    }
}

fn classify_status(code: tonic::Code, message: &str) -> Failure {
    // etcd-client's balanced channel reports a member it cannot connect to this way.
    const NOT_CONNECTED: [&str; 4] = ["error trying to connect", "tcp connect error", "Connection refused", "Service was not ready"];
    // The member refused before proposing: without a leader it proposes nothing.
    const NO_LEADER: [&str; 2] = ["etcdserver: no leader", "raft proposal dropped"];
    if NOT_CONNECTED.iter().chain(&NO_LEADER).any(|m| message.contains(m)) {
        return Failure::NotTaken;
    }
    match code {
        // A member unavailable mid-request ("leader changed", "request timed out", a reset
        // connection), or a request that ran out of time: it may have been applied.
        tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Cancelled => Failure::Unknown,
        // A broken HTTP/2 connection surfaces as Unknown with the transport's words.
        tonic::Code::Unknown if message.contains("transport error") || message.contains("connection") || message.contains("h2 protocol error") => Failure::Unknown,
        _ => Failure::Answered,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_told_apart_by_what_etcd_could_have_done() {
        let refused = "Service was not ready: transport error: buffered service failed: load balancer discovery error: error trying to connect: tcp connect error: Connection refused (os error 111)";
        assert_eq!(classify_status(tonic::Code::Unknown, refused), Failure::NotTaken);
        assert_eq!(classify_status(tonic::Code::Unavailable, "etcdserver: no leader"), Failure::NotTaken);
        assert_eq!(classify_status(tonic::Code::Unavailable, "etcdserver: leader changed"), Failure::Unknown);
        assert_eq!(classify_status(tonic::Code::Unavailable, "etcdserver: request timed out"), Failure::Unknown);
        assert_eq!(classify_status(tonic::Code::Cancelled, "Timeout expired"), Failure::Unknown);
        assert_eq!(classify_status(tonic::Code::Unknown, "transport error"), Failure::Unknown);
        assert_eq!(classify_status(tonic::Code::OutOfRange, "etcdserver: mvcc: required revision has been compacted"), Failure::Answered);
        assert_eq!(classify_status(tonic::Code::ResourceExhausted, "etcdserver: mvcc: database space exceeded"), Failure::Answered);
        assert_eq!(classify_status(tonic::Code::PermissionDenied, "etcdserver: permission denied"), Failure::Answered);
    }
}
