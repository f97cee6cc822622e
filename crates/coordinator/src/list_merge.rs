//! One LIST page from K shard pages read at the same revision.
//!
//! Every shard is asked for the items after the same resume key, at the same revision R, with the
//! same limit. The merged page is the smallest items across shards, but never past the last key
//! of a shard that said it has more: items beyond it on that shard are unseen. So each page is
//! exact, and paging with `continue_after` yields every item exactly once, in order (I4).

/// One shard's answer: items after the resume key in ascending key order, and whether more
/// follow. A shard with more must return at least one item.
#[derive(Clone, Debug)]
pub struct ShardPage<K, T> {
    pub items: Vec<(K, T)>,
    pub more: bool,
}

/// The merged page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MergedPage<K, T> {
    pub items: Vec<(K, T)>,
    /// Resume after this key; `None` when the list is complete.
    pub continue_after: Option<K>,
}

/// Why shard pages cannot be merged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListMergeError {
    #[error("shard {0} said it has more items but returned none")]
    EmptyPageWithMore(usize),
    #[error("shard {0} returned items out of order")]
    Unsorted(usize),
}

/// Merges shard pages into one page of at most `limit` items.
pub fn merge<K: Ord + Clone, T>(pages: Vec<ShardPage<K, T>>, limit: Option<usize>) -> Result<MergedPage<K, T>, ListMergeError> {
    let mut bound: Option<K> = None;
    for (i, p) in pages.iter().enumerate() {
        if p.items.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err(ListMergeError::Unsorted(i));
        }
        if p.more {
            let last = p.items.last().ok_or(ListMergeError::EmptyPageWithMore(i))?.0.clone();
            if bound.as_ref().is_none_or(|b| last < *b) {
                bound = Some(last);
            }
        }
    }
    let mut all: Vec<(K, T)> = pages.into_iter().flat_map(|p| p.items).collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    let total = all.len();
    let limit = limit.unwrap_or(usize::MAX);
    let items: Vec<(K, T)> = all.into_iter().take_while(|(k, _)| bound.as_ref().is_none_or(|b| k <= b)).take(limit).collect();
    let complete = bound.is_none() && items.len() == total;
    let continue_after = if complete { None } else { items.last().map(|(k, _)| k.clone()) };
    Ok(MergedPage { items, continue_after })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A shard answering "after `after`, at most `limit`", returning a random shortfall.
    fn shard_page(items: &[u32], after: Option<u32>, limit: usize, short: usize) -> ShardPage<u32, ()> {
        let rest: Vec<u32> = items.iter().copied().filter(|k| after.is_none_or(|a| *k > a)).collect();
        let n = limit.min(rest.len());
        let n = if n > 1 { n - short.min(n - 1) } else { n };
        ShardPage { items: rest[..n].iter().map(|k| (*k, ())).collect(), more: n < rest.len() }
    }

    proptest! {
        /// I4: paging a merged list yields every item exactly once, in order, with pages no
        /// larger than the limit, whatever the split and however short the shard pages.
        #[test]
        fn paging_yields_everything_once_in_order(keys in proptest::collection::btree_set(any::<u32>(), 0..200), k in 1usize..6, seed in any::<u64>(), limit in 1usize..30) {
            let mut shards: Vec<Vec<u32>> = vec![vec![]; k];
            for (i, key) in keys.iter().enumerate() {
                shards[((seed >> (i % 61)) as usize ^ i) % k].push(*key);
            }
            let mut after = None;
            let mut got = Vec::new();
            for round in 0..10_000 {
                let pages = shards.iter().enumerate().map(|(i, s)| shard_page(s, after, limit, (seed as usize + i + round) % 3)).collect();
                let page = merge(pages, Some(limit)).unwrap();
                prop_assert!(page.items.len() <= limit);
                prop_assert!(!page.items.is_empty() || page.continue_after.is_none());
                got.extend(page.items.iter().map(|(k, _)| *k));
                match page.continue_after {
                    Some(a) => after = Some(a),
                    None => break,
                }
            }
            prop_assert_eq!(got, keys.into_iter().collect::<Vec<_>>());
        }
    }

    #[test]
    fn refuses_inconsistent_pages() {
        let bad = vec![ShardPage { items: vec![(2, ()), (1, ())], more: false }];
        assert_eq!(merge(bad, None).unwrap_err(), ListMergeError::Unsorted(0));
        let empty_more: Vec<ShardPage<u32, ()>> = vec![ShardPage { items: vec![], more: true }];
        assert_eq!(merge(empty_more, Some(1)).unwrap_err(), ListMergeError::EmptyPageWithMore(0));
    }
}
