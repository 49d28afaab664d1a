//! A small SVG line plot for the report: one polyline per series (a server,
//! a transport, a member count), linear or log axes, a legend. Hand-written
//! SVG, so that results need no plotting tool.

use std::fmt::Write as _;

/// One axis: its label and scale.
pub(crate) struct Axis {
    label: String,
    log: bool,
}

impl Axis {
    pub(crate) fn linear(label: &str) -> Self {
        Self {
            label: label.into(),
            log: false,
        }
    }

    pub(crate) fn log(label: &str) -> Self {
        Self {
            label: label.into(),
            log: true,
        }
    }

    /// The range drawn and its tick values, for the data's `min..=max`.
    fn ticks(&self, min: f64, max: f64) -> (f64, f64, Vec<f64>) {
        if self.log {
            let lo = 10f64.powf(min.max(f64::MIN_POSITIVE).log10().floor());
            let hi = 10f64.powf(max.max(lo * 10.0).log10().ceil());
            let decades = (hi / lo).log10().round() as i32;
            let steps: &[f64] = if decades <= 2 {
                &[1.0, 2.0, 5.0]
            } else {
                &[1.0]
            };
            let mut ticks = Vec::new();
            for d in 0..=decades {
                for s in steps {
                    let v = lo * 10f64.powi(d) * s;
                    if v <= hi * 1.0001 {
                        ticks.push(v);
                    }
                }
            }
            (lo, hi, ticks)
        } else {
            let top = if max > 0.0 { max * 1.1 } else { 1.0 };
            let raw = top / 5.0;
            let magnitude = 10f64.powf(raw.log10().floor());
            let step = [1.0, 2.0, 2.5, 5.0, 10.0]
                .iter()
                .map(|m| m * magnitude)
                .find(|s| *s >= raw)
                .unwrap_or(raw);
            let hi = (top / step).ceil() * step;
            let ticks = (0..=(hi / step).round() as usize)
                .map(|i| i as f64 * step)
                .collect();
            (0.0, hi, ticks)
        }
    }
}

/// One line.
pub(crate) struct Series {
    pub(crate) name: String,
    pub(crate) colour: &'static str,
    pub(crate) dashed: bool,
    pub(crate) points: Vec<(f64, f64)>,
}

pub(crate) struct Plot {
    pub(crate) title: String,
    pub(crate) x: Axis,
    pub(crate) y: Axis,
    pub(crate) series: Vec<Series>,
}

/// A tick label: short, without trailing zeros (1k for 1 000).
fn label(v: f64) -> String {
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    if v >= 1e6 {
        format!("{}M", trim(format!("{:.1}", v / 1e6)))
    } else if v >= 1e3 {
        format!("{}k", trim(format!("{:.1}", v / 1e3)))
    } else if v >= 1.0 || v == 0.0 {
        trim(format!("{v:.1}"))
    } else {
        trim(format!("{v:.3}"))
    }
}

impl Plot {
    pub(crate) fn svg(&self) -> String {
        // The legend's column widens for long series names; the plot's area does not change.
        let longest = self.series.iter().map(|s| s.name.chars().count()).max();
        let right = (48.0 + longest.unwrap_or(0) as f64 * 6.8).max(190.0);
        let (w, h, left, top, bottom) = (530.0 + right, 400.0, 64.0, 40.0, 48.0);
        let points = || self.series.iter().flat_map(|s| s.points.iter());
        let fold = |f: fn(&(f64, f64)) -> f64, init: f64, pick: fn(f64, f64) -> f64| {
            points().map(f).fold(init, pick)
        };
        let (x_min, x_max) = (
            fold(|p| p.0, f64::MAX, f64::min),
            fold(|p| p.0, 0.0, f64::max),
        );
        let (y_min, y_max) = (
            fold(|p| p.1, f64::MAX, f64::min),
            fold(|p| p.1, 0.0, f64::max),
        );
        let (x_lo, x_hi, x_ticks) = self.x.ticks(x_min.min(x_max), x_max);
        let (y_lo, y_hi, y_ticks) = self.y.ticks(y_min.min(y_max), y_max);
        let scale = |axis: &Axis, v: f64, lo: f64, hi: f64| -> f64 {
            if axis.log {
                (v.max(lo).log10() - lo.log10()) / (hi.log10() - lo.log10())
            } else {
                (v - lo) / (hi - lo)
            }
        };
        let x = |v: f64| left + scale(&self.x, v, x_lo, x_hi) * (w - left - right);
        let y = |v: f64| h - bottom - scale(&self.y, v, y_lo, y_hi) * (h - top - bottom);
        let mut svg = format!(
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{:.1}" y="22" text-anchor="middle" font-size="14">{}</text>
<line x1="{left}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="black"/>
<line x1="{left}" y1="{top}" x2="{left}" y2="{:.1}" stroke="black"/>
<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>
<text x="14" y="{:.1}" transform="rotate(-90 14 {:.1})" text-anchor="middle">{}</text>
"#,
            (left + w - right) / 2.0,
            self.title,
            h - bottom,
            w - right,
            h - bottom,
            h - bottom,
            (left + w - right) / 2.0,
            h - 10.0,
            self.x.label,
            (top + h - bottom) / 2.0,
            (top + h - bottom) / 2.0,
            self.y.label,
        );
        for t in &x_ticks {
            let _ = writeln!(
                svg,
                r##"<line x1="{0:.1}" y1="{top}" x2="{0:.1}" y2="{1:.1}" stroke="#e2e8f0"/><text x="{0:.1}" y="{2:.1}" text-anchor="middle">{3}</text>"##,
                x(*t),
                h - bottom,
                h - bottom + 16.0,
                label(*t)
            );
        }
        for t in &y_ticks {
            let _ = writeln!(
                svg,
                r##"<line x1="{left}" y1="{0:.1}" x2="{1:.1}" y2="{0:.1}" stroke="#e2e8f0"/><text x="{2:.1}" y="{3:.1}" text-anchor="end">{4}</text>"##,
                y(*t),
                w - right,
                left - 6.0,
                y(*t) + 4.0,
                label(*t)
            );
        }
        let drawn = self.series.iter().filter(|s| !s.points.is_empty());
        for (i, s) in drawn.enumerate() {
            let dash = if s.dashed {
                r#" stroke-dasharray="6 4""#
            } else {
                ""
            };
            let line: Vec<String> = s
                .points
                .iter()
                .map(|(a, b)| format!("{:.1},{:.1}", x(*a), y(*b)))
                .collect();
            let _ = writeln!(
                svg,
                r#"<polyline fill="none" stroke="{}" stroke-width="2"{dash} points="{}"/>"#,
                s.colour,
                line.join(" ")
            );
            for (a, b) in &s.points {
                let _ = writeln!(
                    svg,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{}"/>"#,
                    x(*a),
                    y(*b),
                    s.colour
                );
            }
            let ly = top + 18.0 * i as f64;
            let _ = writeln!(
                svg,
                r#"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{}" stroke-width="2"{dash}/><text x="{:.1}" y="{:.1}">{}</text>"#,
                w - right + 12.0,
                ly + 5.0,
                w - right + 36.0,
                ly + 5.0,
                s.colour,
                w - right + 42.0,
                ly + 9.0,
                s.name
            );
        }
        svg.push_str("</svg>\n");
        svg
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_ticks_cover_the_data_in_decades() {
        let (lo, hi, ticks) = Axis::log("x").ticks(10_000.0, 1_000_000.0);
        assert_eq!((lo, hi), (10_000.0, 1_000_000.0));
        assert_eq!(ticks.first(), Some(&10_000.0));
        assert_eq!(ticks.last(), Some(&1_000_000.0));
        // Two decades or fewer get 2 and 5 between the powers of ten.
        assert!(ticks.contains(&50_000.0));
        let (_, _, wide) = Axis::log("x").ticks(0.1, 500.0);
        assert_eq!(wide, [0.1, 1.0, 10.0, 100.0, 1000.0]);
    }

    #[test]
    fn linear_ticks_start_at_zero_and_pass_the_maximum() {
        let (lo, hi, ticks) = Axis::linear("y").ticks(3.0, 187.0);
        assert_eq!(lo, 0.0);
        assert!(hi >= 187.0 * 1.1, "{hi}");
        assert_eq!(ticks.first(), Some(&0.0));
        assert!(ticks.len() >= 4 && ticks.len() <= 8, "{ticks:?}");
    }

    #[test]
    fn every_series_is_drawn_where_its_points_are() {
        let plot = Plot {
            title: "t".into(),
            x: Axis::log("subscribers"),
            y: Axis::linear("µs"),
            series: vec![
                Series {
                    name: "kube-pulse".into(),
                    colour: "#000001",
                    dashed: false,
                    points: vec![(100.0, 2.0), (10_000.0, 4.0)],
                },
                Series {
                    name: "raw baseline".into(),
                    colour: "#000002",
                    dashed: true,
                    points: vec![(100.0, 1.0)],
                },
                Series {
                    name: "empty".into(),
                    colour: "#000003",
                    dashed: false,
                    points: vec![],
                },
            ],
        };
        let svg = plot.svg();
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert_eq!(svg.matches("<circle").count(), 3);
        assert!(svg.contains("kube-pulse") && svg.contains("raw baseline"));
        assert!(!svg.contains(">empty<"));
        assert!(svg.contains("stroke-dasharray"));
        assert!(svg.contains(">10k<") && svg.contains(">100<"));
        assert_eq!(label(1_000_000.0), "1M");
        assert_eq!(label(2.5), "2.5");
    }
}
