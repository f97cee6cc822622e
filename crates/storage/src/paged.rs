//! Reading a key range page by page at one revision, in pieces when it is large (RFC 0018).
//!
//! etcd 3.5 answers every limited range read with the number of keys from the read's start to the
//! range's end, and counts them by visiting each one. Paging `n` keys through one range
//! therefore visits about n²/(2·page) keys: at a million keys and pages of 500, a billion, and a
//! shard's first list took minutes. The first page's answer says how many keys there are; past
//! [`PIECE_KEYS`], the rest of the range is read as pieces of about that many keys, each paged on
//! its own, so every read counts at most one piece and the whole read visits a few times `n`.

use crate::{Kv, Result, Storage};
use shardplane_keyspace::etcd_layout::hash_cuts;

/// About how many keys one piece of a large range holds.
pub const PIECE_KEYS: u64 = 2_000;

/// A paged read of `[start, end)` at one revision.
pub struct RangeReader {
    /// The piece being read: where its next page starts, and its end.
    reading: Option<(Vec<u8>, Vec<u8>)>,
    /// The pieces after it, last first.
    later: Vec<(Vec<u8>, Vec<u8>)>,
    revision: u64,
    limit: i64,
    /// Whether the range may still be cut (only after its first page).
    uncut: bool,
    keys_only: bool,
    pieces: usize,
}

impl RangeReader {
    /// Reads `[start, end)` at `revision` (0: the revision of the first page), at most `limit`
    /// keys a page.
    pub fn new(start: &[u8], end: &[u8], revision: u64, limit: i64) -> Self {
        Self { reading: Some((start.to_vec(), end.to_vec())), later: Vec::new(), revision, limit, uncut: true, keys_only: false, pieces: 1 }
    }

    /// Reads the keys without their values.
    pub fn keys_only(mut self) -> Self {
        self.keys_only = true;
        self
    }

    /// How many pieces the range is read in (1 until it is cut, and for a range that is not).
    pub fn pieces(&self) -> usize {
        self.pieces
    }

    /// The revision every page is read at (0 until the first page when none was given).
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The next page, in key order; `None` once the range is read.
    pub async fn next_page(&mut self, storage: &Storage) -> Result<Option<Vec<Kv>>> {
        let Some((from, end)) = self.reading.take() else { return Ok(None) };
        let page = storage.read_page(&from, &end, self.revision, self.limit, self.keys_only).await?;
        self.revision = page.revision;
        self.reading = page.next.map(|next| (next, end.clone()));
        if std::mem::take(&mut self.uncut) && page.count > PIECE_KEYS {
            if let Some((next, _)) = &self.reading {
                self.cut(&from, &end, next.clone(), page.count);
            }
        }
        if self.reading.is_none() {
            self.reading = self.later.pop();
        }
        Ok(Some(page.kvs))
    }

    /// Cuts `[start, end)` into pieces of about [`PIECE_KEYS`] keys (`count` in all) and reads on
    /// from `next` piece by piece.
    fn cut(&mut self, start: &[u8], end: &[u8], next: Vec<u8>, count: u64) {
        let cuts = hash_cuts(start, end, count.div_ceil(PIECE_KEYS));
        if cuts.is_empty() {
            return;
        }
        let bounds: Vec<&[u8]> = cuts.iter().map(Vec::as_slice).chain(std::iter::once(end)).collect();
        let mut pieces = Vec::with_capacity(bounds.len());
        let mut from = next;
        for upto in bounds {
            if from.as_slice() < upto {
                pieces.push((std::mem::replace(&mut from, upto.to_vec()), upto.to_vec()));
            }
        }
        // The first page's piece, read already, counts too.
        self.pieces = cuts.len() + 1;
        pieces.reverse();
        self.reading = pieces.pop();
        self.later = pieces;
    }
}
