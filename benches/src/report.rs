//! What a scenario reports: Markdown tables, targets with measured values and whether each is
//! met, and PNG plots drawn from the run's own numbers.

use plotters::prelude::*;
use std::path::Path;

/// What one run says of a target. A comparison whose interval (see [`Paired::interval`])
/// still holds the goal after its last pair is *unsettled*: the run cannot tell, and says so
/// rather than calling it met or missed on the side its median happened to fall (RFC 0017,
/// "Verdicts across runs").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Met,
    Missed,
    Unsettled,
}

impl Verdict {
    /// The word in a report's `met` column.
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Met => "yes",
            Verdict::Missed => "no",
            Verdict::Unsettled => "unsettled",
        }
    }

    /// The verdict a report's `met` cell (`**yes**`, `**no**`, `**unsettled**`) spells.
    pub fn from_cell(cell: &str) -> Option<Verdict> {
        [Verdict::Met, Verdict::Missed, Verdict::Unsettled].into_iter().find(|v| cell.trim_matches('*') == v.word())
    }
}

/// A target measured by one number (a count, a heap size) is met or missed.
impl From<bool> for Verdict {
    fn from(met: bool) -> Self {
        if met { Verdict::Met } else { Verdict::Missed }
    }
}

/// A target of the issue: the measured value against the goal.
pub struct Target {
    pub what: String,
    pub measured: String,
    pub goal: String,
    pub verdict: Verdict,
}

/// One scenario's part of RESULTS.md.
pub struct Section {
    pub title: String,
    pub body: String,
    pub targets: Vec<Target>,
}

impl Section {
    pub fn new(title: impl Into<String>) -> Self {
        Self { title: title.into(), body: String::new(), targets: Vec::new() }
    }

    pub fn line(&mut self, s: impl AsRef<str>) {
        self.body.push_str(s.as_ref());
        self.body.push('\n');
    }

    /// A Markdown table.
    pub fn table(&mut self, head: &[&str], rows: &[Vec<String>]) {
        self.line(format!("| {} |", head.join(" | ")));
        self.line(format!("|{}", "---|".repeat(head.len())));
        for r in rows {
            self.line(format!("| {} |", r.join(" | ")));
        }
        self.line("");
    }

    pub fn target(&mut self, what: impl Into<String>, measured: impl Into<String>, goal: impl Into<String>, verdict: impl Into<Verdict>) {
        self.targets.push(Target { what: what.into(), measured: measured.into(), goal: goal.into(), verdict: verdict.into() });
    }

    pub fn render(&self) -> String {
        let mut s = format!("## {}\n\n{}", self.title, self.body);
        if !self.targets.is_empty() {
            s.push_str("| target | measured | goal | met |\n|---|---|---|---|\n");
            for t in &self.targets {
                s.push_str(&format!("| {} | {} | {} | **{}** |\n", t.what, t.measured, t.goal, t.verdict.word()));
            }
            s.push('\n');
        }
        s
    }
}

/// One line of a plot: its label and (x, y) points.
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// Makes DejaVu Sans (Debian's fonts-dejavu-core, installed by install-deps.sh) the font of
/// every plot; plotters draws no text without a registered font.
pub fn register_font() -> bool {
    match std::fs::read(FONT) {
        Ok(bytes) => plotters::style::register_font("sans-serif", FontStyle::Normal, Box::leak(bytes.into_boxed_slice())).is_ok(),
        Err(_) => false,
    }
}

/// Draws a line plot with points to `path` (PNG, 800×500).
pub fn line_plot(path: &Path, title: &str, x_label: &str, y_label: &str, series: &[Series]) -> Result<(), String> {
    let root = BitMapBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let ys = series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let (x_max, y_max) = (xs.fold(0.0_f64, f64::max) * 1.05, ys.fold(0.0_f64, f64::max) * 1.15);
    let mut chart = ChartBuilder::on(&root).caption(title, ("sans-serif", 22)).margin(12).x_label_area_size(40).y_label_area_size(70).build_cartesian_2d(0.0..x_max.max(1.0), 0.0..y_max.max(1e-9)).map_err(|e| e.to_string())?;
    chart.configure_mesh().x_desc(x_label).y_desc(y_label).draw().map_err(|e| e.to_string())?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart.draw_series(LineSeries::new(s.points.iter().copied(), color.stroke_width(2))).map_err(|e| e.to_string())?.label(s.label.clone()).legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
        chart.draw_series(s.points.iter().map(|p| Circle::new(*p, 4, color.filled()))).map_err(|e| e.to_string())?;
    }
    chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).position(SeriesLabelPosition::UpperLeft).draw().map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}

/// p-th percentile (0..=1) of `v` (sorted in place); 0 for an empty slice.
pub fn percentile(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// The confidence a comparison's interval of the median is taken at; an interval below it
/// (fewer than [`least_pairs`] pairs) decides nothing. 99%, not 95%: two runs of ~20 paired
/// targets at 95% disagreed on 4 (RFC 0017, "Verdicts across runs").
pub const CONFIDENCE: f64 = 0.99;

/// The fewest pairs whose lowest-to-highest interval reaches [`CONFIDENCE`] (8 at 99%).
pub fn least_pairs() -> usize {
    (1..).find(|&n| 1.0 - 2.0 * 0.5_f64.powi(n as i32) >= CONFIDENCE).expect("some n reaches any confidence below 1")
}

/// A goal on a compared quantity: the whole interval must lie on its side.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Goal {
    AtLeast(f64),
    AtMost(f64),
}

impl Goal {
    /// Met when the interval lies on the goal's side, missed when it lies wholly beyond it,
    /// unsettled when it holds the goal.
    pub fn verdict(self, interval: Interval) -> Verdict {
        if interval.confidence < CONFIDENCE {
            return Verdict::Unsettled;
        }
        let (good, bad) = match self {
            Goal::AtLeast(g) => (interval.lo >= g, interval.hi < g),
            Goal::AtMost(g) => (interval.hi <= g, interval.lo > g),
        };
        if good {
            Verdict::Met
        } else if bad {
            Verdict::Missed
        } else {
            Verdict::Unsettled
        }
    }
}

/// An interval of the median from order statistics: the median lies in `lo..=hi` with at
/// least `confidence`, whatever the samples' distribution.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Interval {
    pub lo: f64,
    pub hi: f64,
    pub confidence: f64,
}

impl Interval {
    /// Its confidence as a report prints it: a percentage with one decimal, rounded down (the
    /// interval holds the median with *at least* this), without a trailing `.0`. Rounded to a
    /// whole number, 99.6% read as "100%", an interval that cannot miss.
    pub fn confidence_label(&self) -> String {
        let tenths = (1000.0 * self.confidence).floor() / 10.0;
        if tenths.fract() == 0.0 { format!("{tenths:.0}%") } else { format!("{tenths:.1}%") }
    }
}

/// P(X ≤ j) for X ~ Binomial(n, 1/2).
fn binomial_half_cdf(n: usize, j: usize) -> f64 {
    let mut term = 0.5_f64.powi(n as i32); // C(n, 0) / 2^n
    let mut sum = 0.0;
    for i in 0..=j.min(n) {
        sum += term;
        term *= (n - i) as f64 / (i + 1) as f64;
    }
    sum
}

/// How every paired target is decided, said once in each report that has one: `unit` is what
/// gives one sample (pair, round, move), `figures` what each sample is (ratios, added delays).
pub fn verdict_rule(budget: PairBudget, unit: &str, figures: &str) -> String {
    format!(
        "A target's figure is the median of the {unit}s' {figures} and an interval of that median from order statistics: the k-th lowest to the k-th highest {unit}, with k the largest that gives {:.0}% confidence; fewer than {} {unit}s reach it with no k, and decide nothing. \
         It is met (**yes**) when the whole interval is on the goal's side, **no** when the whole interval is beyond it, and **unsettled** when the interval holds the goal: this run cannot tell. \
         Each comparison takes {} {unit}s, and more while its target is unsettled, up to {}.",
        100.0 * CONFIDENCE,
        least_pairs(),
        budget.min,
        budget.cap
    )
}

/// How many pairs a comparison takes: at least `min`, then more while a target's verdict is
/// unsettled, up to `cap` (RFC 0017).
#[derive(Clone, Copy, Debug)]
pub struct PairBudget {
    pub min: usize,
    pub cap: usize,
}

impl PairBudget {
    /// A smoke run's: one pair, decides nothing.
    pub const SMOKE: PairBudget = PairBudget::fixed(1);

    /// Exactly `n` pairs, settled or not.
    pub const fn fixed(n: usize) -> PairBudget {
        PairBudget { min: n, cap: n }
    }

    /// Whether to run another pair, given `taken` pairs and whether every target is settled.
    pub fn more(self, taken: usize, settled: bool) -> bool {
        taken < self.min || (!settled && taken < self.cap)
    }
}

/// One comparison run as interleaved pairs (A, B in alternating order): each pair's ratio A / B.
/// Its verdict is its interval's, not one number's.
#[derive(Clone, Debug, Default)]
pub struct Paired {
    pub ratios: Vec<f64>,
}

impl Paired {
    /// The median ratio.
    pub fn median(&self) -> f64 {
        percentile(&mut self.ratios.clone(), 0.5)
    }

    /// The narrowest interval [k-th lowest, k-th highest] whose confidence is at least
    /// [`CONFIDENCE`]; with too few pairs for that, lowest to highest at the confidence it has
    /// (94% with 5 pairs, 99.2% with 8; the 2nd lowest to the 2nd highest first reaches 99% with
    /// 12 pairs).
    pub fn interval(&self) -> Interval {
        let mut r = self.ratios.clone();
        r.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
        let n = r.len();
        if n == 0 {
            return Interval { lo: f64::NAN, hi: f64::NAN, confidence: 0.0 };
        }
        let confidence = |k: usize| 1.0 - 2.0 * binomial_half_cdf(n, k - 1);
        let k = (1..=n.div_ceil(2)).rev().find(|&k| confidence(k) >= CONFIDENCE).unwrap_or(1);
        Interval { lo: r[k - 1], hi: r[n - k], confidence: confidence(k).max(0.0) }
    }

    /// This comparison's verdict against `goal`.
    pub fn verdict(&self, goal: Goal) -> Verdict {
        goal.verdict(self.interval())
    }

    /// Whether this comparison has settled against `goal` (met or missed): no more pairs needed.
    pub fn settled(&self, goal: Goal) -> bool {
        self.verdict(goal) != Verdict::Unsettled
    }

    /// `median (lo to hi, c% interval, n pairs)`, ratios as percentages.
    pub fn describe(&self) -> String {
        let i = self.interval();
        format!("{:.0}% ({:.0}% to {:.0}%, {} interval, {})", 100.0 * self.median(), 100.0 * i.lo, 100.0 * i.hi, i.confidence_label(), self.count())
    }

    /// `median× (lo× to hi×, c% interval, n pairs)`: for ratios that are multiples, not shares.
    pub fn describe_times(&self) -> String {
        let i = self.interval();
        format!("{:.2}× ({:.2}× to {:.2}×, {} interval, {})", self.median(), i.lo, i.hi, i.confidence_label(), self.count())
    }

    /// `n pairs` (`1 pair`).
    fn count(&self) -> String {
        format!("{} pair{}", self.ratios.len(), if self.ratios.len() == 1 { "" } else { "s" })
    }
}

pub fn mib(bytes: f64) -> String {
    format!("{:.1} MiB", bytes / (1024.0 * 1024.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_ranks() {
        let mut v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&mut v, 0.5), 51.0);
        assert_eq!(percentile(&mut v, 0.99), 99.0);
        assert_eq!(percentile(&mut v, 1.0), 100.0);
        assert_eq!(percentile(&mut [], 0.5), 0.0);
    }

    #[test]
    fn the_interval_of_the_median_is_taken_from_order_statistics() {
        let p = Paired { ratios: vec![0.85, 0.79, 0.9, 0.95, 0.88] };
        assert_eq!(p.median(), 0.88);
        // Five pairs: lowest to highest is the only interval, at 1 - 2/32.
        assert_eq!(p.interval(), Interval { lo: 0.79, hi: 0.95, confidence: 0.9375 });
        assert_eq!(p.describe(), "88% (79% to 95%, 93.7% interval, 5 pairs)");
        assert_eq!(p.describe_times(), "0.88× (0.79× to 0.95×, 93.7% interval, 5 pairs)");
        assert_eq!(least_pairs(), 8, "1 - 2/256 is the first lowest-to-highest interval at 99%");
        // Eleven pairs: 2nd to 10th is only 98.8%, so lowest to highest.
        let i = Paired { ratios: (1..=11).map(f64::from).collect() }.interval();
        assert_eq!((i.lo, i.hi), (1.0, 11.0));
        // Twelve pairs: the 2nd lowest to the 2nd highest, at 1 - 2·13/4096.
        let i = Paired { ratios: (1..=12).map(f64::from).collect() }.interval();
        assert_eq!((i.lo, i.hi), (2.0, 11.0));
        assert!((i.confidence - (1.0 - 26.0 / 4096.0)).abs() < 1e-12, "{i:?}");
        // Twenty-one pairs: 5th to 17th (99.3%); the 6th to 16th would be only 97%.
        let i = Paired { ratios: (1..=21).map(f64::from).collect() }.interval();
        assert_eq!((i.lo, i.hi), (5.0, 17.0));
        assert!(i.confidence >= CONFIDENCE && i.confidence < 0.995, "{i:?}");
    }

    #[test]
    fn confidence_is_printed_rounded_down() {
        let at = |confidence: f64| Interval { lo: 0.0, hi: 1.0, confidence }.confidence_label();
        assert_eq!(at(0.9375), "93.7%");
        assert_eq!(at(0.99), "99%");
        // 41 pairs' interval: at least 99.5%, never "100%".
        let i = Paired { ratios: (1..=41).map(f64::from).collect() }.interval();
        assert!(i.confidence > 0.995 && i.confidence < 1.0, "{i:?}");
        assert!(i.confidence_label().starts_with("99."), "{}", i.confidence_label());
        assert_eq!(at(1.0), "100%");
    }

    #[test]
    fn a_target_is_met_or_missed_only_when_its_interval_says_so() {
        let p = Paired { ratios: vec![0.85, 0.79, 0.9, 0.95, 0.88, 0.86, 0.87, 0.91] };
        // The median meets 0.8; the interval holds 0.8, so the run cannot tell.
        assert_eq!(p.verdict(Goal::AtLeast(0.8)), Verdict::Unsettled);
        assert_eq!(p.verdict(Goal::AtLeast(0.79)), Verdict::Met);
        assert_eq!(p.verdict(Goal::AtLeast(0.96)), Verdict::Missed);
        // Lower is better.
        assert_eq!(p.verdict(Goal::AtMost(0.9)), Verdict::Unsettled);
        assert_eq!(p.verdict(Goal::AtMost(0.95)), Verdict::Met);
        assert_eq!(p.verdict(Goal::AtMost(0.78)), Verdict::Missed);
        // Fewer than eight pairs decide nothing, however far from the goal.
        let few = Paired { ratios: vec![5.0, 5.1, 5.2, 5.3, 5.4, 5.5, 5.6] };
        assert_eq!(few.verdict(Goal::AtLeast(1.0)), Verdict::Unsettled);
        assert_eq!(Paired::default().verdict(Goal::AtLeast(0.0)), Verdict::Unsettled);
    }

    #[test]
    fn pairs_are_added_while_unsettled_up_to_the_cap() {
        let b = PairBudget { min: 5, cap: 11 };
        assert!(b.more(4, true), "never fewer than min");
        assert!(!b.more(5, true), "settled at min: stop");
        assert!(b.more(5, false) && b.more(10, false), "unsettled: add pairs");
        assert!(!b.more(11, false), "at the cap: stop, unsettled");
        assert!(!PairBudget::SMOKE.more(1, false));
    }

    #[test]
    fn verdict_cells_round_trip() {
        for v in [Verdict::Met, Verdict::Missed, Verdict::Unsettled] {
            assert_eq!(Verdict::from_cell(&format!("**{}**", v.word())), Some(v));
        }
        assert_eq!(Verdict::from_cell("maybe"), None);
    }
}
