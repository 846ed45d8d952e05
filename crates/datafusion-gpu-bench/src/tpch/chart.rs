//! The runner's PNG chart: per-query median times on the CPU, with the GPU rule and, when the run
//! had one, on the peer engine (`--peer`), side by side on a log scale. Text is drawn with the DejaVu Sans Condensed font shipped in `tpch/assets/`
//! (no system fonts needed).

use std::path::Path;
use std::sync::Once;

use plotters::prelude::*;
use plotters::style::FontStyle;

static FONT: &[u8] = include_bytes!("../../tpch/assets/DejaVuSansCondensed.ttf");
static REGISTER: Once = Once::new();

const CPU_COLOR: RGBColor = RGBColor(90, 110, 140);
const GPU_COLOR: RGBColor = RGBColor(118, 185, 0);
const PEER_COLOR: RGBColor = RGBColor(230, 160, 20);

/// One query's bars: CPU, GPU and peer median milliseconds (absent when not measured).
pub struct Bars<'a> {
    pub name: &'a str,
    pub cpu_ms: Option<f64>,
    pub gpu_ms: Option<f64>,
    pub peer_ms: Option<f64>,
}

fn err(e: impl std::fmt::Display) -> String {
    format!("cannot draw the chart: {e}")
}

/// Draws `bars` to `path` (PNG) under `title`.
pub fn draw(path: &Path, title: &str, bars: &[Bars]) -> Result<(), String> {
    let mut font_error = None;
    REGISTER.call_once(|| {
        if plotters::style::register_font("sans-serif", FontStyle::Normal, FONT).is_err() {
            font_error = Some("the bundled font could not be read".to_string());
        }
    });
    if let Some(e) = font_error {
        return Err(err(e));
    }
    let values: Vec<f64> =
        bars.iter().flat_map(|b| [b.cpu_ms, b.gpu_ms, b.peer_ms]).flatten().filter(|v| *v > 0.0).collect();
    let peer = bars.iter().any(|b| b.peer_ms.is_some());
    // Each query's slot holds two bars, or three with a peer: (left edge, width) of each.
    let (w, cpu_at, gpu_at, peer_at) = if peer { (0.27, 0.08, 0.365, 0.65) } else { (0.38, 0.1, 0.52, 0.0) };
    if values.is_empty() {
        return Err(err("no query was timed"));
    }
    let max = values.iter().copied().fold(0.0, f64::max) * 2.0;
    let min = values.iter().copied().fold(f64::INFINITY, f64::min) / 2.0;
    let n = bars.len() as f64;
    let width = (160 + 60 * bars.len()).max(800) as u32;
    let root = BitMapBackend::new(path, (width, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(20)
        .x_label_area_size(30)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..n, (min..max).log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(2)
        .x_label_formatter(&|_| String::new())
        .y_desc("median ms (log scale)")
        .y_label_formatter(&|v| if *v >= 10.0 { format!("{v:.0}") } else { format!("{v:.2}") })
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(err)?;
    let bar = |i: usize, left: f64, v: Option<f64>, color: RGBColor| {
        v.map(|v| Rectangle::new([(i as f64 + left, min), (i as f64 + left + w, v)], color.filled()))
    };
    chart
        .draw_series(bars.iter().enumerate().filter_map(|(i, b)| bar(i, cpu_at, b.cpu_ms, CPU_COLOR)))
        .map_err(err)?
        .label("CPU (DataFusion)")
        .legend(|(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], CPU_COLOR.filled()));
    chart
        .draw_series(bars.iter().enumerate().filter_map(|(i, b)| bar(i, gpu_at, b.gpu_ms, GPU_COLOR)))
        .map_err(err)?
        .label("with the GPU rule")
        .legend(|(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], GPU_COLOR.filled()));
    if peer {
        chart
            .draw_series(bars.iter().enumerate().filter_map(|(i, b)| bar(i, peer_at, b.peer_ms, PEER_COLOR)))
            .map_err(err)?
            .label("DuckDB (same process)")
            .legend(|(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], PEER_COLOR.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font(("sans-serif", 14))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    for (i, b) in bars.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(i as f64 + 0.5, min));
        let style = TextStyle::from(("sans-serif", 14).into_font()).pos(plotters::style::text_anchor::Pos::new(
            plotters::style::text_anchor::HPos::Center,
            plotters::style::text_anchor::VPos::Top,
        ));
        root.draw(&Text::new(b.name.to_string(), (x, y + 6), style)).map_err(err)?;
        if let (Some(c), Some(g)) = (b.cpu_ms, b.gpu_ms)
            && g > 0.0
        {
            let top = c.max(g);
            let (x, y) = chart.backend_coord(&(i as f64 + 0.5, top));
            let style = TextStyle::from(("sans-serif", 12).into_font()).pos(plotters::style::text_anchor::Pos::new(
                plotters::style::text_anchor::HPos::Center,
                plotters::style::text_anchor::VPos::Bottom,
            ));
            root.draw(&Text::new(format!("{:.2}x", c / g), (x, y - 3), style)).map_err(err)?;
        }
    }
    root.present().map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_a_png() {
        let dir = std::env::temp_dir().join(format!("dfg-chart-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("chart.png");
        let bars = [
            Bars { name: "q1", cpu_ms: Some(120.0), gpu_ms: Some(40.0), peer_ms: None },
            Bars { name: "q2", cpu_ms: Some(15.0), gpu_ms: None, peer_ms: None },
        ];
        draw(&path, "test chart", &bars).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[1..4], b"PNG");
        let with_peer = [Bars { name: "q1", cpu_ms: Some(120.0), gpu_ms: Some(40.0), peer_ms: Some(60.0) }];
        draw(&path, "with a peer", &with_peer).unwrap();
        assert_eq!(&std::fs::read(&path).unwrap()[1..4], b"PNG");
        let empty = [Bars { name: "q1", cpu_ms: None, gpu_ms: None, peer_ms: None }];
        assert!(draw(&path, "empty", &empty).is_err());
        std::fs::remove_dir_all(dir).ok();
    }
}
