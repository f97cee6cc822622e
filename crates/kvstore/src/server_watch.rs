//! The Watch service of the embedded store: one stream carries many watches (create with a
//! start revision, key range, previous values, NOPUT / NODELETE filters and progress marks;
//! progress requests; cancel), history replayed in bounded responses, and a watch on a
//! compacted revision cancelled with the compacted revision, as etcd does.

use super::*;

type WatchStream = Pin<Box<dyn Stream<Item = Result<PbWatchResponse, Status>> + Send>>;

#[tonic::async_trait]
impl PbWatchService for EtcdServer {
    type WatchStream = WatchStream;

    async fn watch(&self, request: Request<Streaming<PbWatchRequest>>) -> Result<Response<WatchStream>, Status> {
        let mut requests = request.into_inner();
        let (tx, rx) = mpsc::channel(WATCH_BUFFER);
        let stream = {
            let mut st = self.lock();
            st.next_stream += 1;
            st.next_stream
        };
        let server = self.clone();
        let end_stream = tokio_util::sync::CancellationToken::new();
        // The call is answered once the stream's first request (a create, as clients send) is
        // handled: etcd's response headers travel with its first response, so a client's watch
        // call returns only when the watch is registered, and clients put right after it.
        let (first_handled, first) = tokio::sync::oneshot::channel::<()>();
        let mut first_handled = Some(first_handled);
        tokio::spawn(async move {
            let mut next_id = 0i64;
            let mut notify = tokio::time::interval_at(tokio::time::Instant::now() + PROGRESS_NOTIFY, PROGRESS_NOTIFY);
            loop {
                let req = tokio::select! {
                    req = requests.next() => match req {
                        Some(Ok(req)) => req,
                        _ => break,
                    },
                    _ = end_stream.cancelled() => break,
                    _ = notify.tick() => {
                        let st = server.lock();
                        let revision = st.mvcc.revision();
                        for w in st.watchers.iter().filter(|w| w.stream == stream && w.progress_notify) {
                            let _ = tx.try_send(Ok(PbWatchResponse { header: header(revision), watch_id: w.id, ..Default::default() }));
                        }
                        continue;
                    }
                };
                // Sent when this request's handling ends, however it ends (a guard, because
                // the arms below `continue` and `break`).
                let _first = FirstHandled(first_handled.take());
                let mut st = server.lock();
                match req.request_union {
                    Some(PbWatchRequestUnion::CreateRequest(c)) => {
                        let id = if c.watch_id > 0 { c.watch_id } else { next_id };
                        next_id = next_id.max(id) + 1;
                        let revision = st.mvcc.revision();
                        if st.watchers.len() >= MAX_WATCHES {
                            let _ = tx.try_send(Ok(PbWatchResponse { header: header(revision), watch_id: id, created: true, canceled: true, cancel_reason: "etcdserver: too many watches".into(), ..Default::default() }));
                            continue;
                        }
                        // Replayed and registered under one lock: no change falls between.
                        let past = if c.start_revision > 0 && c.start_revision <= revision { Some(st.mvcc.changes(&c.key, &c.range_end, c.start_revision)) } else { None };
                        if let Some(Err(MvccError::Compacted { compacted })) = past {
                            let _ = tx.try_send(Ok(PbWatchResponse { header: header(revision), watch_id: id, created: true, canceled: true, compact_revision: compacted, ..Default::default() }));
                            continue;
                        }
                        let (no_put, no_delete) = (c.filters.contains(&0), c.filters.contains(&1));
                        if tx.try_send(Ok(PbWatchResponse { header: header(revision), watch_id: id, created: true, ..Default::default() })).is_err() {
                            break;
                        }
                        if let Some(Ok(events)) = past {
                            // The history in responses of whole revisions, up to REPLAY_BYTES
                            // each (etcd also puts several revisions in one response). More
                            // than the stream's buffer holds ends the stream.
                            let mut batch: Vec<PbEvent> = Vec::new();
                            let mut bytes = 0;
                            let mut overflow = false;
                            for (i, e) in events.iter().enumerate() {
                                if passes_filters(e, no_put, no_delete) {
                                    let pb = event_pb(e, c.prev_kv);
                                    bytes += prost::Message::encoded_len(&pb);
                                    batch.push(pb);
                                }
                                let revision_ends = events.get(i + 1).is_none_or(|n| n.kv.mod_revision != e.kv.mod_revision);
                                if revision_ends && !batch.is_empty() && (bytes >= REPLAY_BYTES || i + 1 == events.len()) {
                                    let resp = PbWatchResponse { header: header(revision), watch_id: id, events: std::mem::take(&mut batch), ..Default::default() };
                                    bytes = 0;
                                    if tx.try_send(Ok(resp)).is_err() {
                                        overflow = true;
                                        break;
                                    }
                                }
                            }
                            if overflow {
                                tracing::info!(stream, "an embedded-store watch's history overflowed its stream; ending it");
                                break;
                            }
                        }
                        st.watchers.push(Watcher { stream, id, key: c.key, end: c.range_end, start: c.start_revision, prev_kv: c.prev_kv, progress_notify: c.progress_notify, no_put, no_delete, tx: tx.clone(), end_stream: end_stream.clone() });
                    }
                    Some(PbWatchRequestUnion::CancelRequest(c)) => {
                        st.watchers.retain(|w| !(w.stream == stream && w.id == c.watch_id));
                        let revision = st.mvcc.revision();
                        let _ = tx.try_send(Ok(PbWatchResponse { header: header(revision), watch_id: c.watch_id, canceled: true, ..Default::default() }));
                    }
                    Some(PbWatchRequestUnion::ProgressRequest(_)) => {
                        // After every event up to the revision, since dispatch runs under this lock.
                        let revision = st.mvcc.revision();
                        let _ = tx.try_send(Ok(PbWatchResponse { header: header(revision), watch_id: -1, ..Default::default() }));
                    }
                    None => {}
                }
            }
            server.lock().watchers.retain(|w| w.stream != stream);
        });
        // Err: the stream ended (or its task stopped) before a first request; answer anyway.
        let _ = first.await;
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

/// Says the stream's first request was handled when dropped (after the lock it was handled
/// under is released, since it is declared before it).
struct FirstHandled(Option<tokio::sync::oneshot::Sender<()>>);

impl Drop for FirstHandled {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(());
        }
    }
}

/// Whether a watch with etcd's NOPUT / NODELETE filters is sent `e`.
pub(super) fn passes_filters(e: &Event, no_put: bool, no_delete: bool) -> bool {
    if e.deleted { !no_delete } else { !no_put }
}

#[cfg(test)]
mod tests {
    use crate::server::{serve, EtcdServer, Listener};

    /// Clients put right after their watch call returns (etcd answers the call with the watch's
    /// `created` response): the call must not return before the watch is registered, or those
    /// first events go to no one.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_watch_call_returns_only_once_its_watch_is_registered() {
        let dir = std::env::temp_dir().join(format!("shardplane-watch-created-{}", uuid::Uuid::new_v4()));
        let server = EtcdServer::open(&dir).unwrap();
        let listener = Listener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = listener.endpoint().unwrap();
        let stop = tokio_util::sync::CancellationToken::new();
        let serving = tokio::spawn(serve(server.clone(), listener, stop.clone()));
        let client = etcd_client::Client::connect([endpoint], None).await.unwrap();
        let mut open = Vec::new();
        for i in 0..100 {
            let prefix = format!("w{i:03}/");
            let (watcher, mut stream) = client.watch_client().watch(prefix.clone(), Some(etcd_client::WatchOptions::new().with_prefix())).await.unwrap().split();
            assert_eq!(server.lock().watchers.len(), i + 1, "watch {i} not registered when its call returned");
            client.kv_client().put(format!("{prefix}k"), "v", None).await.unwrap();
            let created = stream.message().await.unwrap().unwrap();
            assert!(created.created() && created.events().is_empty());
            let put = tokio::time::timeout(std::time::Duration::from_secs(10), stream.message()).await.expect("the put's event").unwrap().unwrap();
            assert_eq!(put.events()[0].kv().unwrap().key(), format!("{prefix}k").as_bytes());
            open.push((watcher, stream));
        }
        drop(open);
        stop.cancel();
        serving.await.unwrap().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
