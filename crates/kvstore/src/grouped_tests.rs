//! Grouped commits (RFC 0015, "The liveness tier"): what survives a crash and a clean stop, and
//! that no revision is ever handed out twice.

use super::*;

fn put(s: &EtcdServer, k: &str, v: &str) -> i64 {
    let t = Txn { success: vec![Op::Put { key: k.as_bytes().to_vec(), value: v.as_bytes().to_vec(), lease: 0, prev_kv: false }], ..Txn::default() };
    s.write(&t).unwrap().1
}

fn get(s: &EtcdServer, k: &str, revision: i64) -> Result<Option<String>, MvccError> {
    let r = s.lock().mvcc.range(&RangeRequest { key: k.as_bytes().to_vec(), revision, ..RangeRequest::default() })?;
    Ok(r.kvs.first().map(|kv| String::from_utf8(kv.value.clone()).unwrap()))
}

/// A fresh data directory, removed when dropped.
struct Dir(std::path::PathBuf);

impl Dir {
    fn new() -> Self {
        Self(std::env::temp_dir().join(format!("shardplane-grouped-test-{}", uuid::Uuid::new_v4())))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A store whose commit thread never runs during the test (commits only when asked).
fn open(dir: &Path) -> EtcdServer {
    EtcdServer::open_with(dir, DEFAULT_QUOTA_BYTES, Some(Duration::from_secs(3600))).unwrap()
}

#[test]
fn a_crash_loses_only_the_uncommitted_group_and_no_revision_is_reused() {
    let dir = Dir::new();
    let s = open(dir.path());
    put(&s, "a", "1");
    let committed = put(&s, "b", "1");
    s.flush(false).unwrap();
    put(&s, "a", "2");
    let handed_out = put(&s, "c", "1");
    // Acknowledged and readable before the crash.
    assert_eq!(get(&s, "a", 0).unwrap().as_deref(), Some("2"));
    drop(s); // a crash: the last group was never committed

    let s = open(dir.path());
    // The committed group is back; the lost one is gone, as the promise says.
    assert_eq!(get(&s, "a", 0).unwrap().as_deref(), Some("1"));
    assert_eq!(get(&s, "b", 0).unwrap().as_deref(), Some("1"));
    assert_eq!(get(&s, "c", 0).unwrap(), None);
    // It starts above every revision it handed out, compacted there: a reader of a lost
    // revision (or an older one) is told it was compacted, and relists.
    let start = s.revision();
    assert!(start > handed_out, "{start} > {handed_out}");
    assert!(matches!(get(&s, "a", handed_out), Err(MvccError::Compacted { .. })));
    assert!(matches!(get(&s, "a", committed), Err(MvccError::Compacted { .. })));
    assert!(put(&s, "d", "1") > handed_out);
}

#[test]
fn a_clean_stop_keeps_every_write_and_every_revision() {
    let dir = Dir::new();
    let s = open(dir.path());
    let first = put(&s, "a", "1");
    let last = put(&s, "a", "2");
    s.flush(true).unwrap();
    // Stopped: nothing more is acknowledged.
    let t = Txn { success: vec![Op::Put { key: b"x".to_vec(), value: vec![], lease: 0, prev_kv: false }], ..Txn::default() };
    assert!(s.write(&t).is_err());
    drop(s);
    let s = open(dir.path());
    assert_eq!(s.revision(), last);
    assert_eq!(get(&s, "a", first).unwrap().as_deref(), Some("1"));
    assert_eq!(get(&s, "a", 0).unwrap().as_deref(), Some("2"));
}

#[test]
fn the_ceiling_rises_before_a_revision_above_it_is_handed_out() {
    let dir = Dir::new();
    let s = open(dir.path());
    s.lock().headroom = 3;
    s.flush(false).unwrap();
    // Many more writes than the headroom, none committed: each crossing raised the ceiling
    // durably first, so the restarted store is still above all of them.
    let mut last = 0;
    for i in 0..20 {
        last = put(&s, "k", &i.to_string());
    }
    drop(s);
    let s = open(dir.path());
    assert!(s.revision() > last, "{} > {last}", s.revision());
}

#[test]
fn compaction_commits_the_pending_group_first() {
    let dir = Dir::new();
    let s = open(dir.path());
    put(&s, "a", "1");
    let r = put(&s, "a", "2");
    put(&s, "b", "1");
    let t = s.clone();
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async move {
        t.compact(Request::new(PbCompactionRequest { revision: r, physical: false })).await.unwrap();
    });
    drop(s);
    let s = open(dir.path());
    // Everything up to the compaction was committed with it.
    assert_eq!(get(&s, "a", 0).unwrap().as_deref(), Some("2"));
    assert_eq!(get(&s, "b", 0).unwrap().as_deref(), Some("1"));
}
