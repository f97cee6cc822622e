//! Go's `time.ParseDuration` syntax, which kube-apiserver reads the `timeout` query parameter
//! with: a sign, then one or more decimal numbers each with a unit (`ns`, `us`, `µs`, `μs`, `ms`,
//! `s`, `m`, `h`), as in `300ms`, `1.5h` or `2h45m`; `0` alone is allowed. Written here because
//! the duration crates on crates.io read other grammars (humantime takes spaces and `days`,
//! jiff's friendly format takes words), and a client's `timeout` must mean what it means
//! upstream.

use std::time::Duration;

/// A parsed duration: negative ones are kept apart (a request timeout treats them as absent).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GoDuration {
    NonNegative(Duration),
    Negative,
}

/// Parses `s` as Go does; the error is Go's message (`time: invalid duration "…"`).
pub fn parse(s: &str) -> Result<GoDuration, String> {
    let invalid = || format!("time: invalid duration {s:?}");
    let (negative, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Ok(GoDuration::NonNegative(Duration::ZERO));
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(|b| b.is_ascii_digit()).count();
        let (whole, after) = rest.split_at(digits);
        let (frac, after) = match after.strip_prefix('.') {
            Some(a) => {
                let n = a.bytes().take_while(|b| b.is_ascii_digit()).count();
                a.split_at(n)
            }
            None => ("", after),
        };
        if whole.is_empty() && frac.is_empty() {
            return Err(invalid());
        }
        let unit_len = after.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let nanos_per: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err(format!("time: missing unit in duration {s:?}")),
            _ => return Err(format!("time: unknown unit {unit:?} in duration {s:?}")),
        };
        // Whole part, then as many fraction digits as can matter (nanoseconds at most).
        let mut nanos = whole.bytes().try_fold(0u128, |acc, d| acc.checked_mul(10)?.checked_add(u128::from(d - b'0'))).and_then(|w| w.checked_mul(nanos_per)).ok_or_else(invalid)?;
        let mut scale = nanos_per;
        for d in frac.bytes().take(30) {
            scale /= 10;
            nanos += u128::from(d - b'0') * scale;
        }
        total = total.checked_add(nanos).ok_or_else(invalid)?;
        // Go's durations are int64 nanoseconds.
        if total > i64::MAX as u128 {
            return Err(invalid());
        }
        rest = next;
    }
    Ok(if negative && total > 0 { GoDuration::Negative } else { GoDuration::NonNegative(Duration::from_nanos(total as u64)) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ok(s: &str) -> Duration {
        match parse(s) {
            Ok(GoDuration::NonNegative(d)) => d,
            other => panic!("{s}: {other:?}"),
        }
    }

    #[test]
    fn reads_what_go_reads() {
        assert_eq!(ok("0"), Duration::ZERO);
        assert_eq!(ok("30s"), Duration::from_secs(30));
        assert_eq!(ok("1.5h"), Duration::from_secs(5400));
        assert_eq!(ok("2h45m"), Duration::from_secs(9900));
        assert_eq!(ok("300ms"), Duration::from_millis(300));
        assert_eq!(ok("1µs"), Duration::from_micros(1));
        assert_eq!(ok(".5s"), Duration::from_millis(500));
        assert_eq!(ok("+5s"), Duration::from_secs(5));
        assert_eq!(parse("-5s"), Ok(GoDuration::Negative));
        assert_eq!(parse("5"), Err("time: missing unit in duration \"5\"".into()));
        assert_eq!(parse("5x"), Err("time: unknown unit \"x\" in duration \"5x\"".into()));
        for bad in ["", "-", "s", ".s", "1..2s", "3000000h", "99999999999999999999999s"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    proptest! {
        /// Any string gets an answer (no panic), and a duration written in seconds and
        /// milliseconds reads back.
        #[test]
        fn any_text_gets_an_answer(s in "\\PC{0,12}") {
            let _ = parse(&s);
        }

        #[test]
        fn written_durations_read_back(secs in 0u64..1_000_000, ms in 0u64..1000) {
            prop_assert_eq!(ok(&format!("{secs}s{ms}ms")), Duration::from_secs(secs) + Duration::from_millis(ms));
        }
    }
}
