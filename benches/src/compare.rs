//! `bench compare OLD NEW`: do two reports (two runs' RESULTS.md) reach the same verdict on
//! every target? Issue #24 asks that two consecutive full runs agree; this is how that is
//! checked, from the reports alone, so any two committed runs can be compared later.

use crate::report::Verdict;
use std::collections::BTreeMap;
use std::path::Path;

/// One target row of a report: what was measured and the run's verdict.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub measured: String,
    pub verdict: Verdict,
}

/// Every target row of a rendered report (`report::Section::render`'s tables), keyed by
/// `section :: target`. Rows of other tables are not targets and are skipped.
pub fn verdicts(report: &str) -> BTreeMap<String, Row> {
    let mut out = BTreeMap::new();
    let (mut section, mut in_targets) = (String::new(), false);
    for line in report.lines() {
        if let Some(title) = line.strip_prefix("## ") {
            section = title.trim().to_owned();
            in_targets = false;
        } else if line.starts_with("| target | measured | goal | met |") {
            in_targets = true;
        } else if in_targets && line.starts_with('|') {
            if line.starts_with("|---") {
                continue; // the rule under the header
            }
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
            if let [what, measured, .., met] = cells.as_slice()
                && let Some(verdict) = Verdict::from_cell(met)
            {
                out.insert(format!("{section} :: {what}"), Row { measured: (*measured).to_owned(), verdict });
            }
        } else {
            in_targets = false;
        }
    }
    out
}

/// How far apart two runs' machine speeds may be and still count as like machines: one try
/// spread by up to a fifth around its median on one machine (RFC 0017), the machines of two
/// sessions by 2.5 times.
const SPEED_TOLERANCE: f64 = 0.20;

/// How two runs' verdicts on one target relate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Agreement {
    /// The same verdict in both.
    Same,
    /// One run settled (met or missed), the other's interval held the goal: the second
    /// run does not deny the first, it does not confirm it either.
    OneUnsettled,
    /// Met in one run, missed in the other, or measured in one run only.
    Contradict,
}

impl Agreement {
    fn of(x: Option<&Row>, y: Option<&Row>) -> Agreement {
        match (x.map(|r| r.verdict), y.map(|r| r.verdict)) {
            (Some(a), Some(b)) if a == b => Agreement::Same,
            (Some(Verdict::Unsettled), Some(_)) | (Some(_), Some(Verdict::Unsettled)) => Agreement::OneUnsettled,
            _ => Agreement::Contradict,
        }
    }

    fn cell(self) -> &'static str {
        match self {
            Agreement::Same => "agree",
            Agreement::OneUnsettled => "**differ** (one unsettled)",
            Agreement::Contradict => "**contradict**",
        }
    }
}

/// The comparison as Markdown, and whether every target is in both reports with one verdict.
/// The first line counts the three kinds of [`Agreement`], so a reader sees at once whether
/// the runs differ by a verdict one of them did not settle or contradict each other.
pub fn compare(old: &str, new: &str) -> (String, bool) {
    let (a, b) = (verdicts(old), verdicts(new));
    let mut rows = String::from("| target | first run | second run | verdicts |\n|---|---|---|---|\n");
    let mut counts = [0usize; 3];
    let cell = |v: Option<&Row>| v.map_or_else(|| "(absent)".to_owned(), |v| format!("{} ({})", v.verdict.word(), v.measured));
    for key in a.keys().chain(b.keys().filter(|k| !a.contains_key(*k))) {
        let (x, y) = (a.get(key), b.get(key));
        let agreement = Agreement::of(x, y);
        counts[agreement as usize] += 1;
        rows.push_str(&format!("| {key} | {} | {} | {} |\n", cell(x), cell(y), agreement.cell()));
    }
    let total: usize = counts.iter().sum();
    let [same, one_unsettled, contradict] = counts;
    let head = format!("{same} of {total} verdicts agree; {one_unsettled} differ with one run unsettled; {contradict} contradict (met in one run, missed in the other, or in one run only).");
    (format!("{head}\n\n{}\n\n{rows}", crate::speed::compare_line(old, new, SPEED_TOLERANCE)), same == total && total > 0)
}

/// Reads both reports, prints the comparison; exits 1 when a verdict differs or a target is
/// in only one report, 2 when a report cannot be read.
pub fn run(old: &Path, new: &Path) -> ! {
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_else(|e| {
        eprintln!("bench compare: {}: {e}", p.display());
        std::process::exit(2)
    });
    let (text, agree) = compare(&read(old), &read(new));
    print!("{text}");
    std::process::exit(if agree { 0 } else { 1 })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Section;
    use Verdict::*;

    fn report(met: &[Verdict]) -> String {
        let mut s = Section::new("write");
        s.line("| operation | ops/s |\n|---|---|\n| create | 10 |\n");
        for (i, m) in met.iter().enumerate() {
            s.target(format!("target {i}, of a pair"), format!("{i}%"), "≥ 80%", *m);
        }
        format!("# Benchmark results\n\n**Targets**: x.\n\n{}## other\n\ntext\n", s.render())
    }

    #[test]
    fn verdicts_are_read_back_from_a_rendered_section() {
        let v = verdicts(&report(&[Met, Missed, Unsettled]));
        assert_eq!(v.len(), 3, "{v:?}");
        assert_eq!(v["write :: target 0, of a pair"].verdict, Met);
        assert_eq!(v["write :: target 1, of a pair"], Row { measured: "1%".into(), verdict: Missed });
        assert_eq!(v["write :: target 2, of a pair"].verdict, Unsettled);
    }

    #[test]
    fn reports_agree_only_when_every_verdict_is_the_same() {
        assert!(compare(&report(&[Met, Unsettled]), &report(&[Met, Unsettled])).1);
        let (text, agree) = compare(&report(&[Met, Missed]), &report(&[Met, Met]));
        assert!(!agree);
        assert!(text.starts_with("1 of 2 verdicts agree; 0 differ with one run unsettled; 1 contradict"), "{text}");
        assert!(text.contains("| write :: target 1, of a pair | no (1%) | yes (1%) | **contradict** |"), "{text}");
        // Reports without the machine's speed say that its likeness is unknown.
        assert!(text.contains("whether the machines were alike is unknown"), "{text}");
        // Unsettled in one run and met in the other is a disagreement, counted apart.
        let (text, agree) = compare(&report(&[Unsettled, Missed]), &report(&[Met, Unsettled]));
        assert!(!agree);
        assert!(text.starts_with("0 of 2 verdicts agree; 2 differ with one run unsettled; 0 contradict"), "{text}");
        // A target in one run only contradicts: one run claims what the other never measured.
        let (text, agree) = compare(&report(&[Met]), &report(&[Met, Missed]));
        assert!(!agree);
        assert!(text.starts_with("1 of 2 verdicts agree; 0 differ with one run unsettled; 1 contradict"), "{text}");
        assert!(!compare("", "").1, "two reports without targets prove nothing");
    }
}
