//! A watch of one key range: events in revision order, with progress marks carried in-band.

use crate::endpoints::{classify, Endpoints, Failure};
use crate::{Kv, Result, StorageError};
use std::sync::Arc;
use etcd_client::{EventType, WatchOptions, WatchResponseStream, WatchRequestSender};

/// The largest watch message accepted (etcd's Go client's default, `math.MaxInt32`).
const WATCH_MESSAGE_MAX: usize = i32::MAX as usize;

/// One change of one key.
#[derive(Clone, Debug)]
pub struct WatchEvent {
    /// The key's value after the change (for a delete: key set, value empty).
    pub kv: Kv,
    /// The value before the change, if there was one.
    pub prev: Option<Kv>,
    /// Whether the key was deleted.
    pub deleted: bool,
    /// The revision of the change.
    pub revision: u64,
}

/// What a range watch yields.
#[derive(Debug)]
pub enum WatchItem {
    /// Changes, all at revisions above every earlier item.
    Events(Vec<WatchEvent>),
    /// Every change up to this revision has been delivered (etcd progress, in-band).
    Progress(u64),
}

/// An open watch of `[start, end)`.
pub struct RangeWatch {
    requester: ProgressRequester,
    stream: RangeWatchStream,
}

impl RangeWatch {
    /// Opens the watch of `[start, end)` (with previous values when `prev_kv`) on `client`, the
    /// member `on` names. The outer error is the transport's (the caller may try another
    /// member); the inner one etcd's answer (a compacted start).
    pub(crate) async fn open(client: etcd_client::Client, (start, end, prev_kv): (&[u8], &[u8], bool), after_revision: u64, on: (Arc<Endpoints>, usize)) -> std::result::Result<Result<Self>, etcd_client::Error> {
        let mut opts = WatchOptions::new().with_range(end.to_vec()).with_start_revision(after_revision as i64 + 1).with_progress_notify();
        if prev_kv {
            opts = opts.with_prev_key();
        }
        // etcd sends a catching-up watch up to 1,000 revisions a message, as large as they are;
        // gRPC's default 4 MiB bound made such a watch fail on every attempt (a history of
        // large transactions). etcd's own client accepts up to 2 GiB, and so does this one:
        // the size is etcd's to bound.
        let ws = client.watch_client().max_decoding_message_size(WATCH_MESSAGE_MAX).watch(start.to_vec(), Some(opts)).await?;
        let (sender, mut stream) = ws.split();
        // The first response confirms creation (or says why not).
        match stream.message().await? {
            Some(r) if r.canceled() => return Ok(Err(canceled(&r, after_revision))),
            Some(_) => {}
            None => return Err(etcd_client::Error::WatchError("watch stream closed before creation".into())),
        }
        Ok(Ok(Self { requester: ProgressRequester(sender), stream: RangeWatchStream { stream, on } }))
    }

    /// Asks etcd to push a progress mark into this stream. The mark arrives in-band, after every
    /// event it covers (etcd ≥ 3.5.13).
    pub async fn request_progress(&mut self) -> Result<()> {
        self.requester.request().await
    }

    /// The next item (see [`RangeWatchStream::next`]).
    pub async fn next(&mut self) -> Result<Option<WatchItem>> {
        self.stream.next().await
    }

    /// Splits off a handle that can request progress while another task reads the stream.
    pub fn into_parts(self) -> (ProgressRequester, RangeWatchStream) {
        (self.requester, self.stream)
    }
}

/// Requests progress marks on a watch whose stream is read elsewhere.
pub struct ProgressRequester(WatchRequestSender);

impl ProgressRequester {
    /// See [`RangeWatch::request_progress`].
    pub async fn request(&mut self) -> Result<()> {
        self.0.request_progress().await?;
        Ok(())
    }
}

/// The reading half of a [`RangeWatch`].
pub struct RangeWatchStream {
    stream: WatchResponseStream,
    /// The member it reads from: left when the stream breaks (RFC 0016).
    on: (Arc<Endpoints>, usize),
}

impl RangeWatchStream {
    /// The next item; `Ok(None)` when the stream ended (or the process left its member: the
    /// reader opens it again, RFC 0016), `Err(Compacted)` if etcd cancelled the watch because
    /// its start revision was compacted.
    pub async fn next(&mut self) -> Result<Option<WatchItem>> {
        loop {
            let message = tokio::select! {
                m = self.stream.message() => m,
                // The process left this member (it failed another request): end here, so the
                // reader resumes on the member in use (RFC 0016).
                () = self.on.0.left(self.on.1) => return Ok(None),
            };
            let message = message.inspect_err(|e| {
                // A member that lost its leader (or the connection to it) is left, so the
                // watch opened again goes to another.
                if classify(e) != Failure::Answered {
                    self.on.0.leave(self.on.1);
                }
            });
            let Some(resp) = message? else { return Ok(None) };
            if resp.canceled() {
                return Err(canceled(&resp, 0));
            }
            let rev = resp.header().map_or(0, |h| h.revision() as u64);
            if resp.events().is_empty() {
                if resp.created() {
                    continue;
                }
                return Ok(Some(WatchItem::Progress(rev)));
            }
            let events = resp
                .events()
                .iter()
                .filter_map(|e| {
                    let kv = Kv::from_etcd(e.kv()?);
                    Some(WatchEvent {
                        revision: kv.mod_revision,
                        prev: e.prev_kv().map(Kv::from_etcd),
                        deleted: e.event_type() == EventType::Delete,
                        kv,
                    })
                })
                .collect();
            return Ok(Some(WatchItem::Events(events)));
        }
    }
}

fn canceled(r: &etcd_client::WatchResponse, requested: u64) -> StorageError {
    if r.compact_revision() > 0 {
        StorageError::Compacted { requested, compacted: r.compact_revision() as u64 }
    } else {
        StorageError::Etcd(format!("watch canceled: {}", r.cancel_reason()))
    }
}
