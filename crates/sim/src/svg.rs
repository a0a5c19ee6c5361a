//! A small hand-written SVG line plot of unallocated GPU % against arrived %.

use std::fmt::Write;

/// One curve: a label and y values indexed by x (NaN = gap).
#[derive(Debug, Clone)]
pub struct Series {
    pub label: String,
    pub ys: Vec<f64>,
}

const COLORS: &[&str] = &[
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
];

/// Plots x ∈ [x_lo, x_hi]; y range fits the data.
pub fn plot(title: &str, series: &[Series], x_lo: usize, x_hi: usize) -> String {
    let (w, h, ml, mr, mt, mb) = (760.0, 440.0, 60.0, 170.0, 40.0, 50.0);
    let pw = w - ml - mr;
    let ph = h - mt - mb;
    let mut y_hi: f64 = 0.0;
    for s in series {
        for y in s.ys.iter().take(x_hi + 1).skip(x_lo) {
            if y.is_finite() {
                y_hi = y_hi.max(*y);
            }
        }
    }
    let y_hi = (y_hi / 5.0).ceil().max(1.0) * 5.0;
    let span = (x_hi.saturating_sub(x_lo)).max(1) as f64;
    let sx = |x: usize| ml + (x.saturating_sub(x_lo)) as f64 / span * pw;
    let sy = |y: f64| mt + ph - y / y_hi * ph;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{}" y="22" font-size="14">{}</text>"#,
        ml,
        escape(title)
    );
    let _ = writeln!(
        out,
        r#"<rect x="{ml}" y="{mt}" width="{pw}" height="{ph}" fill="none" stroke="black"/>"#
    );
    for i in 0..=5 {
        let y = y_hi * f64::from(i) / 5.0;
        let (yy, ty) = (sy(y), sy(y) + 4.0);
        let (x2, tx) = (ml + pw, ml - 6.0);
        let _ = writeln!(
            out,
            r##"<line x1="{ml}" x2="{x2}" y1="{yy}" y2="{yy}" stroke="#ddd"/><text x="{tx}" y="{ty}" text-anchor="end">{y:.1}</text>"##
        );
    }
    let step = if span > 40.0 { 10 } else { 5 };
    let mut x = x_lo.div_ceil(step) * step;
    while x <= x_hi {
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" text-anchor="middle">{x}</text>"#,
            sx(x),
            mt + ph + 18.0
        );
        x += step;
    }
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle">arrived workload (% of GPU capacity)</text>"#,
        ml + pw / 2.0,
        h - 8.0
    );
    let _ = writeln!(
        out,
        r#"<text x="16" y="{}" transform="rotate(-90 16 {0})" text-anchor="middle">unallocated GPU %</text>"#,
        mt + ph / 2.0
    );
    for (i, s) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let mut d = String::new();
        let mut pen_down = false;
        for x in x_lo..=x_hi {
            match s.ys.get(x) {
                Some(y) if y.is_finite() => {
                    let _ = write!(
                        d,
                        "{}{:.1},{:.1} ",
                        if pen_down { "L" } else { "M" },
                        sx(x),
                        sy(*y)
                    );
                    pen_down = true;
                }
                _ => pen_down = false,
            }
        }
        let _ = writeln!(
            out,
            r#"<path d="{d}" fill="none" stroke="{color}" stroke-width="1.6"/>"#
        );
        let ly = mt + 14.0 + 18.0 * i as f64;
        let _ = writeln!(
            out,
            r#"<line x1="{}" x2="{}" y1="{ly}" y2="{ly}" stroke="{color}" stroke-width="3"/><text x="{}" y="{}">{}</text>"#,
            ml + pw + 10.0,
            ml + pw + 30.0,
            ml + pw + 36.0,
            ly + 4.0,
            escape(&s.label)
        );
    }
    out.push_str("</svg>\n");
    out
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
