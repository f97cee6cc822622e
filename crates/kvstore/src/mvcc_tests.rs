//! The MVCC key space against a model that keeps the whole key space after every revision.

use super::*;
use proptest::prelude::*;

/// The model: the whole key space after every revision, and the changes of each revision.
struct Model {
    states: Vec<BTreeMap<Vec<u8>, Kv>>,
    compacted: i64,
}

impl Model {
    fn new() -> Self {
        // Revision 1 is the empty key space (index = revision - 1).
        Self { states: vec![BTreeMap::new()], compacted: 0 }
    }
    fn revision(&self) -> i64 {
        self.states.len() as i64
    }
    fn current(&self) -> &BTreeMap<Vec<u8>, Kv> {
        self.states.last().unwrap()
    }
}

#[derive(Clone, Debug)]
enum Action {
    Put(u8, u8),
    Delete(u8),
    DeleteRange(u8, u8),
    /// Put if the key's mod revision is (or is not) what it is now.
    CasPut(u8, u8, bool),
    Read { back: u8, from: u8, to: u8, limit: u8 },
    Watch { back: u8 },
    Compact { back: u8 },
}

fn key(k: u8) -> Vec<u8> {
    vec![b'k', b'0' + k % 8]
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        4 => (any::<u8>(), any::<u8>()).prop_map(|(k, v)| Action::Put(k, v)),
        2 => any::<u8>().prop_map(Action::Delete),
        1 => (any::<u8>(), any::<u8>()).prop_map(|(a, b)| Action::DeleteRange(a, b)),
        2 => (any::<u8>(), any::<u8>(), any::<bool>()).prop_map(|(k, v, ok)| Action::CasPut(k, v, ok)),
        3 => (any::<u8>(), any::<u8>(), any::<u8>(), 0u8..4).prop_map(|(back, from, to, limit)| Action::Read { back, from, to, limit }),
        2 => any::<u8>().prop_map(|back| Action::Watch { back }),
        1 => any::<u8>().prop_map(|back| Action::Compact { back }),
    ]
}

/// The model's key space after a write: `put` or delete of each key.
fn write(model: &mut Model, changes: &[(Vec<u8>, Option<Vec<u8>>)]) {
    let rev = model.revision() + 1;
    let mut next = model.current().clone();
    for (k, v) in changes {
        match v {
            Some(v) => {
                let prev = next.get(k);
                let kv = Kv { key: k.clone(), value: v.clone(), create_revision: prev.map_or(rev, |p| p.create_revision), mod_revision: rev, version: prev.map_or(1, |p| p.version + 1), lease: 0 };
                next.insert(k.clone(), kv);
            }
            None => {
                next.remove(k);
            }
        }
    }
    model.states.push(next);
}

proptest! {
    /// Reads at any kept revision, watches from any kept revision and compaction agree with a
    /// model that keeps the whole key space after every revision.
    #[test]
    fn the_key_space_matches_a_model_of_every_revision(actions in proptest::collection::vec(action(), 1..80)) {
        let mut m = Mvcc::new();
        let mut model = Model::new();
        let no_lease = |_| false;
        for a in actions {
            match a {
                Action::Put(k, v) => {
                    let txn = Txn { success: vec![Op::Put { key: key(k), value: vec![v], lease: 0, prev_kv: true }], ..Txn::default() };
                    let (res, events) = m.txn(&txn, &no_lease).unwrap();
                    let prev = model.current().get(&key(k)).cloned().map(Arc::new);
                    prop_assert_eq!(&res.responses[0], &OpResult::Put { prev });
                    write(&mut model, &[(key(k), Some(vec![v]))]);
                    prop_assert_eq!(events.len(), 1);
                }
                Action::Delete(k) => {
                    let txn = Txn { success: vec![Op::Delete { key: key(k), end: vec![], prev_kv: false }], ..Txn::default() };
                    let (res, _) = m.txn(&txn, &no_lease).unwrap();
                    let existed = model.current().contains_key(&key(k)) as i64;
                    prop_assert_eq!(&res.responses[0], &OpResult::Delete { deleted: existed, prev: vec![] });
                    if existed == 1 {
                        write(&mut model, &[(key(k), None)]);
                    }
                }
                Action::DeleteRange(a, b) => {
                    let (lo, hi) = (key(a.min(b)), key(a.max(b)));
                    let txn = Txn { success: vec![Op::Delete { key: lo.clone(), end: hi.clone(), prev_kv: true }], ..Txn::default() };
                    let (res, events) = m.txn(&txn, &no_lease).unwrap();
                    let doomed: Vec<Vec<u8>> = model.current().keys().filter(|k| **k >= lo && **k < hi).cloned().collect();
                    let OpResult::Delete { deleted, .. } = &res.responses[0] else { panic!() };
                    prop_assert_eq!(*deleted, doomed.len() as i64);
                    prop_assert_eq!(events.len(), doomed.len());
                    if !doomed.is_empty() {
                        write(&mut model, &doomed.into_iter().map(|k| (k, None)).collect::<Vec<_>>());
                    }
                }
                Action::CasPut(k, v, ok) => {
                    let now = model.current().get(&key(k)).map_or(0, |kv| kv.mod_revision);
                    let expect = if ok { now } else { now + 1 };
                    let txn = Txn {
                        compare: vec![Compare { key: key(k), end: vec![], op: CompareOp::Equal, target: CompareTarget::Mod(expect) }],
                        success: vec![Op::Put { key: key(k), value: vec![v], lease: 0, prev_kv: false }],
                        failure: vec![Op::Range(RangeRequest { key: key(k), ..RangeRequest::default() })],
                    };
                    let (res, _) = m.txn(&txn, &no_lease).unwrap();
                    prop_assert_eq!(res.succeeded, ok);
                    if ok {
                        write(&mut model, &[(key(k), Some(vec![v]))]);
                    }
                }
                Action::Read { back, from, to, limit } => {
                    let rev = model.revision() - (back as i64 % model.revision());
                    let (lo, hi) = (key(from.min(to)), key(from.max(to)));
                    let r = RangeRequest { key: lo.clone(), end: hi.clone(), revision: rev, limit: limit as i64, ..RangeRequest::default() };
                    match m.range(&r) {
                        Err(MvccError::Compacted { .. }) => prop_assert!(rev < model.compacted),
                        Err(e) => prop_assert!(false, "{e}"),
                        Ok(got) => {
                            prop_assert!(rev >= model.compacted);
                            let want: Vec<&Kv> = model.states[rev as usize - 1].values().filter(|kv| kv.key >= lo && kv.key < hi).collect();
                            prop_assert_eq!(got.count, want.len() as i64);
                            let n = if limit == 0 { want.len() } else { want.len().min(limit as usize) };
                            prop_assert_eq!(got.kvs.iter().map(|k| (**k).clone()).collect::<Vec<_>>(), want[..n].iter().map(|k| (*k).clone()).collect::<Vec<_>>());
                            prop_assert_eq!(got.more, n < want.len());
                        }
                    }
                }
                Action::Watch { back } => {
                    let start = model.revision() - (back as i64 % model.revision()) + 1;
                    match m.changes(b"k", b"l", start) {
                        Err(MvccError::Compacted { .. }) => prop_assert!(start < model.compacted),
                        Err(e) => prop_assert!(false, "{e}"),
                        Ok(events) => {
                            // The model's changes: the difference between consecutive states.
                            let mut want = Vec::new();
                            for rev in start.max(2)..=model.revision() {
                                let (before, after) = (&model.states[rev as usize - 2], &model.states[rev as usize - 1]);
                                let keys: std::collections::BTreeSet<&Vec<u8>> = before.keys().chain(after.keys()).collect();
                                for k in keys {
                                    match (before.get(k), after.get(k)) {
                                        (_, Some(a)) if a.mod_revision == rev => want.push((rev, k.clone(), false)),
                                        (Some(_), None) => want.push((rev, k.clone(), true)),
                                        _ => {}
                                    }
                                }
                            }
                            let got: Vec<(i64, Vec<u8>, bool)> = events.iter().map(|e| (e.kv.mod_revision, e.kv.key.clone(), e.deleted)).collect();
                            prop_assert_eq!(got, want);
                        }
                    }
                }
                Action::Compact { back } => {
                    let rev = model.revision() - (back as i64 % model.revision());
                    match m.compact(rev) {
                        Ok(()) => {
                            prop_assert!(rev > model.compacted);
                            model.compacted = rev;
                        }
                        Err(MvccError::Compacted { .. }) => prop_assert!(rev <= model.compacted),
                        Err(e) => prop_assert!(false, "{e}"),
                    }
                }
            }
            prop_assert_eq!(m.revision(), model.revision());
        }
    }
}

#[test]
fn transactions_refuse_a_key_twice_and_unknown_leases() {
    let mut m = Mvcc::new();
    let put = |k: &str| Op::Put { key: k.as_bytes().to_vec(), value: b"v".to_vec(), lease: 0, prev_kv: false };
    let txn = Txn { success: vec![put("a"), put("a")], ..Txn::default() };
    assert_eq!(m.txn(&txn, &|_| true).unwrap_err(), MvccError::DuplicateKey);
    let txn = Txn { success: vec![Op::Put { key: b"a".to_vec(), value: vec![], lease: 7, prev_kv: false }], ..Txn::default() };
    assert_eq!(m.txn(&txn, &|_| false).unwrap_err(), MvccError::LeaseNotFound);
    assert_eq!(m.revision(), 1, "a refused transaction writes nothing");
    assert_eq!(m.range(&RangeRequest { revision: 5, ..RangeRequest::default() }).unwrap_err(), MvccError::FutureRevision);
}
