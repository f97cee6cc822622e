//! Resource quantities (`500m`, `1Gi`, `2e3`) as upstream's `resource.Quantity` reads, compares
//! and prints them, for the admission rules that compare requests and limits. Values are held
//! exactly, in units of 10⁻⁹ (a quantity finer than a nano rounds up, as upstream rounds).
//! Hand-written: the one crate that parses Kubernetes quantities (`k8s-openapi`'s `Quantity`)
//! keeps only the string.

/// A parsed quantity: its value in nano-units and the suffix family it was written in (upstream
/// prints a quantity back in the same family).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quantity {
    /// The value × 10⁹.
    pub nanos: i128,
    /// Written with a binary suffix (`Ki`…`Ei`).
    pub binary: bool,
}

const NANO: i128 = 1_000_000_000;

fn suffix_scale(suffix: &str) -> Option<(i128, i128, bool)> {
    // (numerator, denominator) of the multiplier in nano-units, binary.
    let b = |p: u32| Some((NANO * (1i128 << (10 * p)), 1, true));
    let d = |e: u32| Some((NANO * 10i128.pow(e), 1, false));
    match suffix {
        "" => d(0),
        "n" => Some((1, 1, false)),
        "u" => Some((1_000, 1, false)),
        "m" => Some((1_000_000, 1, false)),
        "k" => d(3),
        "M" => d(6),
        "G" => d(9),
        "T" => d(12),
        "P" => d(15),
        "E" => d(18),
        "Ki" => b(1),
        "Mi" => b(2),
        "Gi" => b(3),
        "Ti" => b(4),
        "Pi" => b(5),
        "Ei" => b(6),
        _ => {
            // Decimal exponent: e3, E-2.
            let exp: i32 = suffix.strip_prefix(['e', 'E'])?.parse().ok()?;
            if !(-9..=18).contains(&exp) {
                return None;
            }
            if exp >= 0 { Some((NANO * 10i128.pow(exp as u32), 1, false)) } else { Some((NANO, 10i128.pow((-exp) as u32), false)) }
        }
    }
}

impl Quantity {
    /// Parses upstream's quantity grammar; None for text that is not a quantity.
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.trim();
        let (neg, body) = match s.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, s.strip_prefix('+').unwrap_or(s)),
        };
        let split = body.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(body.len());
        let (number, suffix) = body.split_at(split);
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return None;
        }
        let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
        if whole.len() + frac.len() > 30 {
            return None;
        }
        let (num, den, binary) = suffix_scale(suffix)?;
        let digits: i128 = format!("{whole}{frac}").parse().ok()?;
        let frac_den = 10i128.checked_pow(frac.len() as u32)?;
        let total_den = den.checked_mul(frac_den)?;
        let scaled = digits.checked_mul(num)?;
        // Round up, as upstream rounds a quantity too fine to hold.
        let nanos = (scaled + total_den - 1) / total_den;
        Some(Self { nanos: if neg { -nanos } else { nanos }, binary })
    }

    /// Upstream's canonical text: binary quantities with the largest binary suffix that keeps
    /// an integer, decimal ones with the largest power-of-1000 suffix that does (down to `n`).
    pub fn canonical(&self) -> String {
        let (sign, v) = if self.nanos < 0 { ("-", -self.nanos) } else { ("", self.nanos) };
        if v == 0 {
            return "0".into();
        }
        if self.binary && v % NANO == 0 {
            let mut units = v / NANO;
            let mut i = 0;
            const SUFFIXES: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
            while i < 6 && units % 1024 == 0 {
                units /= 1024;
                i += 1;
            }
            return format!("{sign}{units}{}", SUFFIXES[i]);
        }
        const DECIMAL: [(&str, i128); 10] = [("E", NANO * 10i128.pow(18)), ("P", NANO * 10i128.pow(15)), ("T", NANO * 10i128.pow(12)), ("G", NANO * 10i128.pow(9)), ("M", NANO * 10i128.pow(6)), ("k", NANO * 1000), ("", NANO), ("m", 1_000_000), ("u", 1_000), ("n", 1)];
        let (suffix, unit) = DECIMAL.iter().find(|(_, unit)| v % unit == 0).copied().unwrap_or(("n", 1));
        format!("{sign}{}{suffix}", v / unit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reads_and_prints_as_upstream() {
        for (text, canonical) in [("500m", "500m"), ("0.5", "500m"), ("1000m", "1"), ("2000", "2k"), ("1500", "1500"), ("1Gi", "1Gi"), ("2048Mi", "2Gi"), ("1.5Gi", "1536Mi"), ("1e3", "1k"), ("100n", "100n"), ("0", "0"), ("-2", "-2")] {
            assert_eq!(Quantity::parse(text).map(|q| q.canonical()).as_deref(), Some(canonical), "{text}");
        }
        assert!(Quantity::parse("1Gi").unwrap().nanos > Quantity::parse("1G").unwrap().nanos);
        assert_eq!(Quantity::parse("1k").unwrap().nanos, Quantity::parse("1000").unwrap().nanos);
        for bad in ["", "Gi", "1.2.3", "1x", "--1", "."] {
            assert!(Quantity::parse(bad).is_none(), "{bad}");
        }
    }

    proptest! {
        #[test]
        fn canonical_text_reads_back_to_the_same_value(n in 0i64..1_000_000_000, suffix in prop_oneof![Just(""), Just("m"), Just("k"), Just("Mi"), Just("Gi"), Just("n")]) {
            let q = Quantity::parse(&format!("{n}{suffix}")).unwrap();
            let back = Quantity::parse(&q.canonical()).unwrap();
            prop_assert_eq!(back.nanos, q.nanos);
        }
    }
}
