//! The redb-backed store across restarts: a reopened store keeps every revision a client can see, compactions included.

use super::*;
use crate::mvcc::{Op, RangeRequest, Txn};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Action {
    /// Puts and deletes of several keys in one transaction.
    Write(Vec<(u8, Option<u8>)>),
    Compact { back: u8 },
    Restart,
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        6 => proptest::collection::vec((0u8..6, proptest::option::of(any::<u8>())), 1..4).prop_map(Action::Write),
        1 => any::<u8>().prop_map(|back| Action::Compact { back }),
        1 => Just(Action::Restart),
    ]
}

/// Everything a client can observe of the key space: the whole key space at every kept
/// revision, and every change (with previous values) from the compacted revision on.
fn observe(m: &Mvcc) -> (i64, i64, Vec<Vec<Kv>>, Vec<Event>) {
    let first = m.compacted().max(1);
    let states = (first..=m.revision()).map(|rev| m.range(&RangeRequest { key: vec![0], end: vec![0], revision: rev, ..RangeRequest::default() }).unwrap().kvs.iter().map(|kv| (**kv).clone()).collect()).collect();
    (m.revision(), m.compacted(), states, m.changes(&[0], &[0], first).unwrap())
}

fn key(k: u8) -> Vec<u8> {
    vec![b'k', b'0' + k]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// What is read back after a restart is what was there before it, whatever was compacted:
    /// the same revisions, values and history, including a delete made at exactly the
    /// compacted revision.
    #[test]
    fn a_restart_keeps_every_revision_a_client_can_see(actions in proptest::collection::vec(action(), 1..60)) {
        let dir = std::env::temp_dir().join(format!("shardplane-store-test-{}", uuid::Uuid::new_v4()));
        let (mut store, mut m, _) = Store::open(&dir).unwrap();
        for a in actions {
            match a {
                Action::Write(changes) => {
                    let mut seen = std::collections::BTreeSet::new();
                    let ops = changes.into_iter().filter(|(k, _)| seen.insert(*k)).map(|(k, v)| match v {
                        Some(v) => Op::Put { key: key(k), value: vec![v], lease: 0, prev_kv: false },
                        None => Op::Delete { key: key(k), end: vec![], prev_kv: false },
                    }).collect();
                    let (_, events) = m.txn(&Txn { success: ops, ..Txn::default() }, &|_| false).unwrap();
                    if !events.is_empty() {
                        store.append(m.revision(), &events).unwrap();
                    }
                }
                Action::Compact { back } => {
                    let rev = m.revision() - (back as i64 % m.revision());
                    if m.compact(rev).is_ok() {
                        store.compact(rev).unwrap();
                    }
                }
                Action::Restart => {
                    let before = observe(&m);
                    drop(store);
                    let (s, reopened, _) = Store::open(&dir).unwrap();
                    store = s;
                    m = reopened;
                    prop_assert_eq!(observe(&m), before);
                }
            }
        }
        let before = observe(&m);
        drop(store);
        let (_store, reopened, _) = Store::open(&dir).unwrap();
        prop_assert_eq!(observe(&reopened), before);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// The case the old layout lost: a key deleted at exactly the compacted revision.
#[test]
fn a_delete_at_the_compacted_revision_survives_a_restart() {
    let dir = std::env::temp_dir().join(format!("shardplane-store-test-{}", uuid::Uuid::new_v4()));
    let (store, mut m, _) = Store::open(&dir).unwrap();
    for op in [Op::Put { key: key(1), value: b"v".to_vec(), lease: 0, prev_kv: false }, Op::Delete { key: key(1), end: vec![], prev_kv: false }] {
        let (_, events) = m.txn(&Txn { success: vec![op], ..Txn::default() }, &|_| false).unwrap();
        store.append(m.revision(), &events).unwrap();
    }
    m.compact(3).unwrap();
    store.compact(3).unwrap();
    drop(store);
    let (_store, m, _) = Store::open(&dir).unwrap();
    let changes = m.changes(&[0], &[0], 3).unwrap();
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert!(changes[0].deleted && changes[0].kv.key == key(1) && changes[0].kv.mod_revision == 3);
    let _ = std::fs::remove_dir_all(&dir);
}
