//! What a request costs in seats (RFC 0013, "Width"), as upstream's work estimator reckons it:
//! one seat, except a LIST (and a watch's initial state, which is a list), which takes a seat
//! per 100 objects it may go through, at most 10. Our lists are served from the watch cache,
//! so they go through every stored object of the resource whatever their `limit` or selector
//! (upstream's estimate for a list from the cache).

use shardplane_identity::rbac::Attributes;

/// Upstream's objects per seat.
pub const OBJECTS_PER_SEAT: u64 = 100;
/// Upstream's most seats for one request.
pub const MAX_SEATS: u32 = 10;

/// The seats of a request for `attrs` when `stored` objects of its resource are held (`None`:
/// not known, one seat).
pub fn seats(attrs: &Attributes, stored: Option<u64>) -> u32 {
    match stored {
        Some(n) if lists(attrs) => n.div_ceil(OBJECTS_PER_SEAT).clamp(1, MAX_SEATS as u64) as u32,
        _ => 1,
    }
}

/// Whether a request for `attrs` goes through its resource's objects (a LIST, or a watch's
/// initial state): only then does its width ask how many are stored.
pub fn lists(attrs: &Attributes) -> bool {
    attrs.resource_request && matches!(attrs.verb.as_str(), "list" | "watch")
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardplane_identity::rbac::request::attributes;

    #[test]
    fn lists_take_a_seat_per_hundred_objects_up_to_ten() {
        let list = attributes("GET", "/api/v1/pods", false, "");
        assert_eq!([0, 1, 100, 101, 950, 5000].map(|n| seats(&list, Some(n))), [1, 1, 1, 2, 10, 10]);
        assert_eq!(seats(&list, None), 1);
        assert_eq!(seats(&attributes("GET", "/api/v1/pods", true, ""), Some(350)), 4);
        assert_eq!(seats(&attributes("GET", "/api/v1/namespaces/a/pods/p", false, ""), Some(5000)), 1);
        assert_eq!(seats(&attributes("POST", "/api/v1/namespaces/a/pods", false, ""), Some(5000)), 1);
    }
}
