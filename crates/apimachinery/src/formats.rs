//! The string `format`s a CRD's schema may name, checked as upstream checks them (kube-openapi's
//! strfmt registry, the formats apiextensions-apiserver allows): a value of another shape is
//! refused with `<path> in body must be of type <format>`. A format outside that list is not
//! checked, as upstream; `password` never is.
//!
//! Dates and times are parsed with jiff, addresses with `std::net`, base64 with the base64
//! crate, UUIDs with uuid; the rest are the registry's patterns.

use base64::Engine;
use regex::Regex;
use std::sync::LazyLock;

fn re(p: &str) -> Regex {
    Regex::new(p).expect("a valid pattern")
}

static HOSTNAME: LazyLock<Regex> = LazyLock::new(|| re(r"^([a-zA-Z0-9\p{S}\p{L}]((-?[a-zA-Z0-9\p{S}\p{L}]{0,62})?)|([a-zA-Z0-9\p{S}\p{L}](([a-zA-Z0-9-\p{S}\p{L}]{0,61}[a-zA-Z0-9\p{S}\p{L}])?)(\.)){1,}([a-zA-Z\p{L}]){2,63})$"));
static EMAIL: LazyLock<Regex> = LazyLock::new(|| re(r"^[^@\s<>()\[\],;:]+@[^@\s<>()\[\],;:]+$"));
static URI: LazyLock<Regex> = LazyLock::new(|| re(r"^([a-zA-Z][a-zA-Z0-9+.\-]*:|/)\S*$"));
static DURATION: LazyLock<Regex> = LazyLock::new(|| re(r"^(?:[-+]?\d+(?:\.\d+)?\s*(?:ns|us|µs|ms|s|m|h|d|w|sec|secs|second|seconds|min|mins|minute|minutes|hr|hrs|hour|hours|day|days|wk|wks|week|weeks)\s*)+$"));
static HEXCOLOR: LazyLock<Regex> = LazyLock::new(|| re(r"^#?([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$"));
static RGBCOLOR: LazyLock<Regex> = LazyLock::new(|| re(r"^rgb\(\s*(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])\s*,\s*(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])\s*,\s*(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])\s*\)$"));
static SSN: LazyLock<Regex> = LazyLock::new(|| re(r"^\d{3}[- ]?\d{2}[- ]?\d{4}$"));
static BSON_OBJECT_ID: LazyLock<Regex> = LazyLock::new(|| re(r"^[0-9a-fA-F]{24}$"));

/// Whether `s` has the shape `format` names (true for a format nobody checks).
pub fn matches(format: &str, s: &str) -> bool {
    match format {
        "date-time" | "datetime" => s.parse::<jiff::Timestamp>().is_ok() || s.parse::<jiff::civil::DateTime>().is_ok(),
        "date" => s.len() == 10 && s.parse::<jiff::civil::Date>().is_ok(),
        "duration" => DURATION.is_match(s),
        "uuid" => uuid_version(s).is_some(),
        "uuid3" => uuid_version(s) == Some(3),
        "uuid4" => uuid_version(s) == Some(4),
        "uuid5" => uuid_version(s) == Some(5),
        "ipv4" => s.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<std::net::Ipv6Addr>().is_ok(),
        "cidr" => cidr(s),
        "mac" => mac(s),
        "hostname" => s.len() <= 255 && HOSTNAME.is_match(s),
        "email" => EMAIL.is_match(s),
        "uri" => URI.is_match(s),
        "byte" => base64::engine::general_purpose::STANDARD.decode(s).is_ok(),
        "hexcolor" => HEXCOLOR.is_match(s),
        "rgbcolor" => RGBCOLOR.is_match(s),
        "ssn" => SSN.is_match(s),
        "bsonobjectid" => BSON_OBJECT_ID.is_match(s),
        "isbn" => isbn10(s) || isbn13(s),
        "isbn10" => isbn10(s),
        "isbn13" => isbn13(s),
        "creditcard" => luhn(s),
        _ => true,
    }
}

/// The version of a UUID in its canonical 8-4-4-4-12 form.
fn uuid_version(s: &str) -> Option<usize> {
    (s.len() == 36).then(|| uuid::Uuid::try_parse(s).ok()).flatten().map(|u| u.get_version_num())
}

/// As Go's `net.ParseMAC`: 6, 8 or 20 octets as hex pairs joined by `:` or by `-`, or as
/// groups of four hex digits joined by `.`.
fn mac(s: &str) -> bool {
    let hex = |g: &str, n: usize| g.len() == n && g.chars().all(|c| c.is_ascii_hexdigit());
    for (sep, width, counts) in [(':', 2, [6, 8, 20]), ('-', 2, [6, 8, 20]), ('.', 4, [3, 4, 10])] {
        let groups: Vec<&str> = s.split(sep).collect();
        if groups.len() > 1 {
            return counts.contains(&groups.len()) && groups.iter().all(|g| hex(g, width));
        }
    }
    false
}

fn cidr(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else { return false };
    let Ok(bits) = bits.parse::<u8>() else { return false };
    match ip.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => bits <= 32,
        Ok(std::net::IpAddr::V6(_)) => bits <= 128,
        Err(_) => false,
    }
}

/// The digits of an ISBN or card number, without the separators it may be written with.
fn digits(s: &str) -> Vec<char> {
    s.chars().filter(|c| *c != '-' && *c != ' ').collect()
}

fn isbn10(s: &str) -> bool {
    let d = digits(s);
    if d.len() != 10 || !d[..9].iter().all(char::is_ascii_digit) || !(d[9].is_ascii_digit() || d[9] == 'X') {
        return false;
    }
    let sum: u32 = d.iter().enumerate().map(|(i, c)| (10 - i as u32) * c.to_digit(10).unwrap_or(10)).sum();
    sum.is_multiple_of(11)
}

fn isbn13(s: &str) -> bool {
    let d = digits(s);
    if d.len() != 13 || !d.iter().all(char::is_ascii_digit) {
        return false;
    }
    let sum: u32 = d.iter().enumerate().map(|(i, c)| c.to_digit(10).unwrap_or(0) * if i % 2 == 0 { 1 } else { 3 }).sum();
    sum.is_multiple_of(10)
}

fn luhn(s: &str) -> bool {
    let d = digits(s);
    if !(13..=19).contains(&d.len()) || !d.iter().all(char::is_ascii_digit) {
        return false;
    }
    let sum: u32 = d.iter().rev().enumerate().map(|(i, c)| {
        let n = c.to_digit(10).unwrap_or(0);
        if i % 2 == 1 { if n * 2 > 9 { n * 2 - 9 } else { n * 2 } } else { n }
    }).sum();
    sum.is_multiple_of(10)
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn each_format_accepts_its_shape_and_refuses_another() {
        for (format, good, bad) in [
            ("date-time", "2026-11-30T15:04:05Z", "yesterday"),
            ("date-time", "2026-11-30T15:04:05.123+01:00", "2026-13-30T15:04:05Z"),
            ("date", "2026-11-30", "2026-11-31"),
            ("duration", "1h30m", "soon"),
            ("duration", "3 days", "3 fortnights"),
            ("uuid", "6ba7b810-9dad-11d1-80b4-00c04fd430c8", "6ba7b8109dad11d180b400c04fd430c8"),
            ("uuid4", "f47ac10b-58cc-4372-a567-0e02b2c3d479", "6ba7b810-9dad-11d1-80b4-00c04fd430c8"),
            ("ipv4", "10.0.0.1", "10.0.0.256"),
            ("ipv6", "fe80::1", "10.0.0.1"),
            ("cidr", "10.0.0.0/8", "10.0.0.0/33"),
            ("mac", "01:23:45:67:89:ab", "01:23:45:67:89"),
            ("hostname", "api.example.com", "-bad-.example.com"),
            ("email", "ops@example.com", "ops.example.com"),
            ("uri", "https://example.com/x", "example dot com"),
            ("byte", "aGVsbG8=", "not base64!"),
            ("hexcolor", "#a1b2c3", "#a1b2c"),
            ("rgbcolor", "rgb(255, 0, 10)", "rgb(256, 0, 0)"),
            ("ssn", "123-45-6789", "123-456-789"),
            ("bsonobjectid", "507f1f77bcf86cd799439011", "507f1f77bcf86cd79943901"),
            ("isbn10", "0-306-40615-2", "0-306-40615-3"),
            ("isbn13", "978-0-306-40615-7", "978-0-306-40615-8"),
            ("creditcard", "4111 1111 1111 1111", "4111 1111 1111 1112"),
        ] {
            assert!(matches(format, good), "{format}: {good} is one");
            assert!(!matches(format, bad), "{format}: {bad} is not one");
        }
        assert!(matches("password", "anything") && matches("int32", "x") && matches("no-such-format", "x"), "unchecked formats pass");
    }
}
