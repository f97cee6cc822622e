//! What a scenario reports: Markdown tables, targets with measured values and whether each is
//! met, and PNG plots drawn from the run's own numbers.

use plotters::prelude::*;
use std::path::Path;

/// A target of the issue: the measured value against the goal.
pub struct Target {
    pub what: String,
    pub measured: String,
    pub goal: String,
    pub met: bool,
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

    pub fn target(&mut self, what: impl Into<String>, measured: impl Into<String>, goal: impl Into<String>, met: bool) {
        self.targets.push(Target { what: what.into(), measured: measured.into(), goal: goal.into(), met });
    }

    pub fn render(&self) -> String {
        let mut s = format!("## {}\n\n{}", self.title, self.body);
        if !self.targets.is_empty() {
            s.push_str("| target | measured | goal | met |\n|---|---|---|---|\n");
            for t in &self.targets {
                s.push_str(&format!("| {} | {} | {} | {} |\n", t.what, t.measured, t.goal, if t.met { "**yes**" } else { "**no**" }));
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

/// One comparison run as interleaved pairs (A, B in alternating order): each pair's ratio A / B.
/// Its verdict is the spread's, not one number's.
#[derive(Clone, Debug, Default)]
pub struct Paired {
    pub ratios: Vec<f64>,
}

impl Paired {
    /// The median ratio.
    pub fn median(&self) -> f64 {
        percentile(&mut self.ratios.clone(), 0.5)
    }

    /// The lowest and highest pair's ratio.
    pub fn spread(&self) -> (f64, f64) {
        let lo = self.ratios.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = self.ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (lo, hi)
    }

    /// `median (lowest to highest, n pairs)`, ratios as percentages.
    pub fn describe(&self) -> String {
        let (lo, hi) = self.spread();
        format!("{:.0}% ({:.0}% to {:.0}%, {} pairs)", 100.0 * self.median(), 100.0 * lo, 100.0 * hi, self.ratios.len())
    }

    /// `median× (lowest× to highest×, n pairs)`: for ratios that are multiples, not shares.
    pub fn describe_times(&self) -> String {
        let (lo, hi) = self.spread();
        format!("{:.2}× ({lo:.2}× to {hi:.2}×, {} pairs)", self.median(), self.ratios.len())
    }

    /// Met only when every pair meets `goal`: the spread, not the median, decides.
    pub fn all_at_least(&self, goal: f64) -> bool {
        !self.ratios.is_empty() && self.spread().0 >= goal
    }

    /// Met only when no pair exceeds `goal` (for ratios where lower is better).
    pub fn all_at_most(&self, goal: f64) -> bool {
        !self.ratios.is_empty() && self.spread().1 <= goal
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
    fn a_paired_target_is_met_only_when_every_pair_meets_it() {
        let p = Paired { ratios: vec![0.85, 0.79, 0.9, 0.95, 0.88] };
        assert_eq!(p.median(), 0.88);
        assert_eq!(p.spread(), (0.79, 0.95));
        // The median meets 0.8; one pair does not, so the target is not met.
        assert!(!p.all_at_least(0.8));
        assert!(p.all_at_least(0.79));
        assert_eq!(p.describe(), "88% (79% to 95%, 5 pairs)");
        assert!(!Paired::default().all_at_least(0.0), "no pairs meet nothing");
        // Lower is better: one pair above the goal decides.
        assert!(!p.all_at_most(0.9));
        assert!(p.all_at_most(0.95));
        assert!(!Paired::default().all_at_most(f64::INFINITY));
        assert_eq!(p.describe_times(), "0.88× (0.79× to 0.95×, 5 pairs)");
    }
}
