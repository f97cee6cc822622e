//! The embedded store against real etcd 3.5 (issue #7): the same random sequences of puts,
//! deletes, range deletes, transactions with comparisons, reads at old revisions, compactions
//! and watches from old revisions go to both through etcd-client, and every answer and every
//! event stream must be the same. The embedded store is reached over a unix socket with the
//! storage crate's connector, so that path is under the same test.
//!
//! It lives with the harness rather than in `shardplane-kvstore`, because it needs both stores
//! the harness starts, and the harness depends on the store: a test of the store's own crate
//! using it would make a dependency cycle.

use shardplane_testkit::Etcd;
use etcd_client::{Client, Compare, CompareOp, DeleteOptions, EventType, GetOptions, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse, WatchOptions};
use proptest::prelude::*;
use std::time::Duration;

#[derive(Clone, Debug)]
enum Action {
    Put(u8, u8),
    Delete(u8),
    DeleteRange(u8, u8),
    CasPut { k: u8, v: u8, current: bool },
    Read { back: u8, from: u8, to: u8, limit: u8, keys_only: bool },
    Compact { back: u8 },
    Watch { back: u8 },
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        4 => (any::<u8>(), any::<u8>()).prop_map(|(k, v)| Action::Put(k, v)),
        2 => any::<u8>().prop_map(Action::Delete),
        1 => (any::<u8>(), any::<u8>()).prop_map(|(a, b)| Action::DeleteRange(a, b)),
        2 => (any::<u8>(), any::<u8>(), any::<bool>()).prop_map(|(k, v, current)| Action::CasPut { k, v, current }),
        3 => (any::<u8>(), any::<u8>(), any::<u8>(), 0u8..4, any::<bool>()).prop_map(|(back, from, to, limit, keys_only)| Action::Read { back, from, to, limit, keys_only }),
        1 => any::<u8>().prop_map(|back| Action::Compact { back }),
        2 => any::<u8>().prop_map(|back| Action::Watch { back }),
    ]
}

fn kv(k: &KeyValue) -> String {
    format!("{}={}@c{}m{}v{}l{}", String::from_utf8_lossy(k.key()), String::from_utf8_lossy(k.value()), k.create_revision(), k.mod_revision(), k.version(), k.lease())
}

fn err(e: etcd_client::Error) -> String {
    match e {
        etcd_client::Error::GRpcStatus(s) => format!("error {:?}: {}", s.code(), s.message()),
        e => format!("error {e}"),
    }
}

/// What one action answered, as text to compare.
async fn run(c: &mut Client, prefix: &str, a: &Action) -> String {
    let now = c.get("\0", Some(GetOptions::new().with_count_only())).await.map(|r| r.header().unwrap().revision()).unwrap_or(1);
    let answer = answer(c, prefix, a, now).await;
    format!("at {now}: {answer}")
}

async fn answer(c: &mut Client, prefix: &str, a: &Action, now: i64) -> String {
    let key = |k: u8| format!("{prefix}k{}", k % 8);
    let rev = |c: i64, back: u8| c - (back as i64 % c.max(1));
    match a {
        Action::Put(k, v) => match c.put(key(*k), vec![*v], Some(PutOptions::new().with_prev_key())).await {
            Ok(r) => format!("put rev {} prev {:?}", r.header().unwrap().revision(), r.prev_key().map(kv)),
            Err(e) => err(e),
        },
        Action::Delete(k) => match c.delete(key(*k), Some(DeleteOptions::new().with_prev_key())).await {
            Ok(r) => format!("delete rev {} deleted {} prev {:?}", r.header().unwrap().revision(), r.deleted(), r.prev_kvs().iter().map(kv).collect::<Vec<_>>()),
            Err(e) => err(e),
        },
        Action::DeleteRange(x, y) => match c.delete(key(*x.min(y)), Some(DeleteOptions::new().with_range(key(*x.max(y))).with_prev_key())).await {
            Ok(r) => format!("delete range rev {} deleted {} prev {:?}", r.header().unwrap().revision(), r.deleted(), r.prev_kvs().iter().map(kv).collect::<Vec<_>>()),
            Err(e) => err(e),
        },
        Action::CasPut { k, v, current } => {
            let m = c.get(key(*k), None).await.map(|r| r.kvs().first().map_or(0, |x| x.mod_revision())).unwrap_or(0);
            let expect = if *current { m } else { m + 1 };
            let txn = Txn::new().when([Compare::mod_revision(key(*k), CompareOp::Equal, expect)]).and_then([TxnOp::put(key(*k), vec![*v], None)]).or_else([TxnOp::get(key(*k), None)]);
            match c.txn(txn).await {
                Ok(r) => {
                    let ops: Vec<String> = r
                        .op_responses()
                        .into_iter()
                        .map(|o| match o {
                            TxnOpResponse::Get(g) => format!("get {:?} count {}", g.kvs().iter().map(kv).collect::<Vec<_>>(), g.count()),
                            TxnOpResponse::Put(p) => format!("put prev {:?}", p.prev_key().map(kv)),
                            other => format!("{other:?}"),
                        })
                        .collect();
                    format!("txn rev {} succeeded {} {ops:?}", r.header().unwrap().revision(), r.succeeded())
                }
                Err(e) => err(e),
            }
        }
        Action::Read { back, from, to, limit, keys_only } => {
            let mut opts = GetOptions::new().with_range(key(*from.max(to))).with_revision(rev(now, *back)).with_limit(*limit as i64);
            if *keys_only {
                opts = opts.with_keys_only();
            }
            match c.get(key(*from.min(to)), Some(opts)).await {
                Ok(r) => format!("get {:?} count {} more {}", r.kvs().iter().map(kv).collect::<Vec<_>>(), r.count(), r.more()),
                Err(e) => err(e),
            }
        }
        Action::Compact { back } => match c.compact(rev(now, *back), None).await {
            Ok(_) => "compacted".into(),
            Err(e) => err(e),
        },
        Action::Watch { back } => {
            let start = rev(now, *back) + 1;
            let opts = WatchOptions::new().with_prefix().with_start_revision(start).with_prev_key();
            let (mut w, mut stream) = match c.watch(prefix, Some(opts)).await {
                Ok(x) => x.split(),
                Err(e) => return err(e),
            };
            let mut events = Vec::new();
            // etcd drops a progress request while the watch is still sending history, so it is
            // asked again until the answer reaches the revision the watch must cover.
            let mut ask = tokio::time::interval(Duration::from_millis(50));
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            loop {
                let next = tokio::select! {
                    m = stream.message() => m,
                    _ = ask.tick() => {
                        assert!(tokio::time::Instant::now() < deadline, "no progress within 10 s");
                        w.request_progress().await.unwrap();
                        continue;
                    }
                };
                let Ok(Some(r)) = next else { return "watch ended".into() };
                if r.canceled() {
                    return format!("watch canceled compact_revision {} reason {}", r.compact_revision(), r.cancel_reason());
                }
                if r.created() && r.events().is_empty() {
                    continue;
                }
                if r.events().is_empty() {
                    if r.header().unwrap().revision() >= now {
                        break;
                    }
                    continue;
                }
                for e in r.events() {
                    let t = if e.event_type() == EventType::Delete { "DELETE" } else { "PUT" };
                    events.push(format!("{t} {} prev {:?}", e.kv().map(kv).unwrap_or_default(), e.prev_kv().map(kv)));
                }
            }
            format!("watch from {start}: {events:?}")
        }
    }
}

#[test]
fn the_embedded_store_answers_as_etcd_does() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (etcd, store) = rt.block_on(async { (Etcd::start_process(&[]).await, Etcd::start_embedded_unix().await) });
    assert!(store.endpoint.starts_with("unix:"), "{}", store.endpoint);
    let (a, b) = rt.block_on(async { (Client::connect([etcd.endpoint.as_str()], None).await.unwrap(), shardplane_storage::Storage::connect(&[store.endpoint.clone()]).await.unwrap().client()) });
    let case = std::sync::atomic::AtomicU32::new(0);
    let clients = std::sync::Mutex::new((a, b));
    proptest!(ProptestConfig::with_cases(48), |(actions in proptest::collection::vec(action(), 1..40))| {
        let prefix = format!("/case{}/", case.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        let mut guard = clients.lock().unwrap();
        let (a, b) = &mut *guard;
        for act in &actions {
            let (x, y) = rt.block_on(async { (run(a, &prefix, act).await, run(b, &prefix, act).await) });
            prop_assert_eq!(&y, &x, "after {:?}", act);
        }
    });
}

/// Lease TTLs at the edges: both stores grant etcd's largest TTL and refuse one past it with the
/// same code and message (the embedded store once computed an expiry instant that overflowed).
#[test]
fn lease_ttls_past_etcds_largest_are_refused_as_etcd_refuses_them() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let (etcd, store) = (Etcd::start_process(&[]).await, Etcd::start_embedded_unix().await);
        let mut a = Client::connect([etcd.endpoint.as_str()], None).await.unwrap();
        let mut b = shardplane_storage::Storage::connect(&[store.endpoint.clone()]).await.unwrap().client();
        for ttl in [9_000_000_000i64, 9_000_000_001, i64::MAX] {
            let (x, y) = (a.lease_grant(ttl, None).await.map(|r| r.ttl()).map_err(err), b.lease_grant(ttl, None).await.map(|r| r.ttl()).map_err(err));
            assert_eq!(y, x, "ttl {ttl}");
            assert_eq!(x.is_ok(), ttl == 9_000_000_000, "ttl {ttl}: {x:?}");
        }
    });
}
