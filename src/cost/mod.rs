//! The cost model: whether an operator runs on the CPU or the GPU, and which GPU algorithm.
//!
//! - [`paper`]: the formulas of seeds 002 and 000, with the papers' names, unit-tested against
//!   the papers' worked numbers.
//! - [`profile`]: the device and host the model prices work on: measured by
//!   `datafusion-gpu bench sweep --calibrate` and cached, or built-in defaults.
//! - [`join`] and [`aggregate`]: each algorithm's cost as calibrated coefficients times the
//!   papers' byte counts, and DataFusion's CPU operators' costs.
//! - [`fit`]: the calibration's least-squares fit.
//!
//! Placement compares the GPU's cost, including the transfers its position in the plan needs
//! (inputs from CPU operators are uploaded; the output is downloaded for a CPU parent), with the
//! CPU's. Everything here is a pure function of sizes and a profile: no GPU is needed.

pub mod aggregate;
pub mod fit;
pub mod join;
pub mod paper;
pub mod profile;

pub use crate::config::PlacementSetting;
use datafusion::arrow::datatypes::{DataType, Schema};

pub use profile::Profile;

/// `1.23 ms`, `45.6 us`, `2.10 s`.
pub fn fmt_seconds(s: f64) -> String {
    if !s.is_finite() {
        "inf".into()
    } else if s >= 1.0 {
        format!("{s:.2} s")
    } else if s >= 1e-3 {
        format!("{:.2} ms", s * 1e3)
    } else {
        format!("{:.1} us", s * 1e6)
    }
}

/// Dot product of a model's features and its coefficients (missing coefficients count as zero).
pub fn dot(features: &[f64], coefficients: &[f64]) -> f64 {
    features.iter().zip(coefficients).map(|(f, c)| f * c).sum()
}

/// Bytes per row of a column of type `dt` in Arrow (strings: offsets plus an assumed 16 bytes
/// of text), for transfer and materialisation estimates.
pub fn value_bytes(dt: &DataType) -> f64 {
    match dt {
        DataType::Boolean => 0.125,
        DataType::Utf8 | DataType::Binary => 4.0 + 16.0,
        DataType::LargeUtf8 | DataType::LargeBinary => 8.0 + 16.0,
        DataType::Utf8View | DataType::BinaryView => 16.0,
        DataType::Dictionary(k, _) => value_bytes(k),
        other => other.primitive_width().map(|w| w as f64).unwrap_or(16.0),
    }
}

/// Bytes per row of all columns of `schema`.
pub fn row_bytes(schema: &Schema) -> f64 {
    schema.fields().iter().map(|f| value_bytes(f.data_type())).sum()
}

/// Bytes per row of all columns of `schema` as they cross the link through the staging
/// buffers: with `narrow` (`gpu.transfer.narrow_decimals`), Decimal128 values of at most 18 digits travel
/// as 8-byte integers (see `columns::device::upload_pieces`); everything else as on the host.
pub fn staged_row_bytes(schema: &Schema, narrow: bool) -> f64 {
    let narrow = narrow && crate::device::transfer::NARROWING;
    schema
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            DataType::Decimal128(digits, _) if *digits <= 18 && narrow => 8.0,
            other => value_bytes(other),
        })
        .sum()
}

/// Seconds to upload `bytes` in `batches` host batches, and to download `bytes`.
pub fn upload_seconds(bytes: f64, batches: f64, profile: &Profile) -> f64 {
    let c = profile.coefficients("transfer");
    c.first().copied().unwrap_or(0.0) * bytes + c.get(1).copied().unwrap_or(0.0) * batches
}

pub fn download_seconds(bytes: f64, profile: &Profile) -> f64 {
    profile.coefficients("transfer").get(2).copied().unwrap_or(0.0) * bytes
}

/// What the model says of one operator: the GPU's estimate (algorithm, transfers) and the CPU's.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Verdict {
    /// The GPU algorithm's device time, the uploads and the download.
    pub gpu_compute: f64,
    pub upload: f64,
    pub download: f64,
    /// The CPU operator's own time.
    pub cpu: f64,
    /// What the CPU operator pays before it starts that the GPU one does not: the download of
    /// its inputs that a GPU exec below produces on the device (0 when none does).
    pub cpu_download: f64,
    /// The hash repartitions of its inputs that the CPU operator needs and the GPU one drops (a
    /// Partitioned join's, see [`join::repartition_seconds`]; 0 when none).
    pub cpu_exchange: f64,
    /// How many times faster than the CPU the GPU must be expected to be (`gpu.cost.min_speedup`).
    pub min_speedup: f64,
}

impl Verdict {
    pub fn gpu_total(&self) -> f64 {
        self.gpu_compute + self.upload + self.download
    }

    /// The CPU operator's time with the download of its device-resident inputs and the
    /// repartitions only it needs.
    pub fn cpu_total(&self) -> f64 {
        self.cpu + self.cpu_download + self.cpu_exchange
    }

    /// How many times faster than the CPU the GPU must be expected to be: `min_speedup`, at
    /// least 1.
    pub fn margin(&self) -> f64 {
        self.min_speedup.max(1.0)
    }

    /// Whether the GPU is expected to be `min_speedup` times faster than the CPU.
    pub fn gpu_wins(&self) -> bool {
        self.gpu_total() * self.margin() < self.cpu_total()
    }

    /// `gpu 1.20 ms (compute 0.30 ms + upload 0.80 ms + download 0.10 ms) vs cpu 2.00 ms`, with
    /// `(operator 1.50 ms + download of its GPU input 0.50 ms)` after the CPU's when it has one
    /// (and `+ hash repartition of its inputs ...` when it needs them).
    pub fn describe(&self) -> String {
        let mut extra = String::new();
        if self.cpu_download > 0.0 {
            extra += &format!(" + download of its GPU input {}", fmt_seconds(self.cpu_download));
        }
        if self.cpu_exchange > 0.0 {
            extra += &format!(" + hash repartition of its inputs {}", fmt_seconds(self.cpu_exchange));
        }
        let cpu = match extra.is_empty() {
            false => format!("{} (operator {}{extra})", fmt_seconds(self.cpu_total()), fmt_seconds(self.cpu)),
            true => fmt_seconds(self.cpu),
        };
        let margin = match self.margin() > 1.0 {
            true => format!(", the GPU to be {:.2}x faster (gpu.cost.min_speedup)", self.margin()),
            false => String::new(),
        };
        format!(
            "estimated gpu {} (compute {} + upload {} + download {}) vs cpu {cpu}{margin}",
            fmt_seconds(self.gpu_total()),
            fmt_seconds(self.gpu_compute),
            fmt_seconds(self.upload),
            fmt_seconds(self.download),
        )
    }
}

/// The model's estimate of every candidate algorithm (in the candidates' order) and the cheapest.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Choice<A> {
    pub best: A,
    pub estimates: Vec<(A, f64)>,
}

impl<A: Copy + PartialEq + std::fmt::Display> Choice<A> {
    /// The cheapest of `estimates`, or `fallback` when there are none.
    pub fn cheapest(estimates: Vec<(A, f64)>, fallback: A) -> Choice<A> {
        let best = estimates.iter().min_by(|a, b| a.1.total_cmp(&b.1)).map(|e| e.0).unwrap_or(fallback);
        Choice { best, estimates }
    }

    /// The estimated seconds of the chosen candidate.
    pub fn seconds(&self) -> f64 {
        self.estimates.iter().find(|(a, _)| *a == self.best).map(|e| e.1).unwrap_or(f64::INFINITY)
    }

    /// `npj 1.20 ms, phj_gfur 0.90 ms, ...` for EXPLAIN.
    pub fn describe(&self) -> String {
        self.estimates.iter().map(|(a, s)| format!("{a} {}", fmt_seconds(*s))).collect::<Vec<_>>().join(", ")
    }
}

/// What the model said of one operator at plan time: the shape it priced, the candidate
/// algorithms' estimates, and the GPU-against-CPU verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate<S, A> {
    pub shape: S,
    pub choice: Choice<A>,
    pub verdict: Verdict,
    /// The sizes are bounds from the plan's shape, not statistics' estimates: good enough to
    /// place the operator, too loose to choose its algorithm (the setting's default runs).
    pub bounded: bool,
    /// Assumptions behind the estimate that EXPLAIN shows with it.
    pub notes: Vec<String>,
    /// The profile it was priced with: the exec chooses again at run time through the estimate
    /// (when it learns the real sizes), under the same profile, without loading one itself.
    pub profile: std::sync::Arc<Profile>,
}

/// An [`Estimate`] without the profile it was priced with: what a plan sent to another process
/// carries (the receiving process prices with its own profile, [`EstimateParts::priced`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EstimateParts<S, A> {
    pub shape: S,
    pub choice: Choice<A>,
    pub verdict: Verdict,
    pub bounded: bool,
    pub notes: Vec<String>,
}

impl<S: Clone, A: Clone> Estimate<S, A> {
    /// This estimate without its profile.
    pub fn parts(&self) -> EstimateParts<S, A> {
        EstimateParts {
            shape: self.shape.clone(),
            choice: self.choice.clone(),
            verdict: self.verdict.clone(),
            bounded: self.bounded,
            notes: self.notes.clone(),
        }
    }
}

impl<S, A> EstimateParts<S, A> {
    /// The estimate again, priced under `profile`.
    pub fn priced(self, profile: std::sync::Arc<Profile>) -> Estimate<S, A> {
        Estimate {
            shape: self.shape,
            choice: self.choice,
            verdict: self.verdict,
            bounded: self.bounded,
            notes: self.notes,
            profile,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Staged uploads price Decimal128 columns of up to 18 digits at 8 bytes when narrowing is
    /// on, wider ones and everything else at their host width.
    #[test]
    fn staged_rows_count_narrowed_decimals() {
        use datafusion::arrow::datatypes::Field;
        let schema = Schema::new(vec![
            Field::new("price", DataType::Decimal128(15, 2), false),
            Field::new("wide", DataType::Decimal128(38, 10), true),
            Field::new("k", DataType::Int32, false),
        ]);
        assert_eq!(row_bytes(&schema), 36.0);
        assert_eq!(staged_row_bytes(&schema, false), 36.0);
        let narrowed = if crate::device::transfer::NARROWING { 28.0 } else { 36.0 };
        assert_eq!(staged_row_bytes(&schema, true), narrowed);
    }

    #[test]
    fn formats_and_widths() {
        assert_eq!(fmt_seconds(2.1), "2.10 s");
        assert_eq!(fmt_seconds(0.00123), "1.23 ms");
        assert_eq!(fmt_seconds(45.6e-6), "45.6 us");
        assert_eq!(value_bytes(&DataType::Int32), 4.0);
        assert_eq!(value_bytes(&DataType::Decimal128(15, 2)), 16.0);
        assert_eq!(value_bytes(&DataType::Utf8), 20.0);
        let v = Verdict {
            gpu_compute: 1e-3,
            upload: 2e-3,
            download: 0.0,
            cpu: 2.5e-3,
            cpu_download: 0.0,
            cpu_exchange: 0.0,
            min_speedup: 1.0,
        };
        assert!(!v.gpu_wins());
        assert!(v.describe().contains("vs cpu 2.50 ms"), "{}", v.describe());
        // A GPU input the CPU operator would download first counts on the CPU's side.
        let v = Verdict { cpu_download: 1e-3, ..v };
        assert!(v.gpu_wins());
        assert!(
            v.describe().ends_with("vs cpu 3.50 ms (operator 2.50 ms + download of its GPU input 1.00 ms)"),
            "{}",
            v.describe()
        );
        let v = Verdict { cpu_download: 0.0, cpu_exchange: 2e-3, ..v };
        assert!(v.gpu_wins());
        assert!(
            v.describe().ends_with("vs cpu 4.50 ms (operator 2.50 ms + hash repartition of its inputs 2.00 ms)"),
            "{}",
            v.describe()
        );
        // gpu.cost.min_speedup: 3 ms against 4.5 ms is 1.5x, enough for 1.4 and not for 1.6, and
        // the reason says what was asked.
        assert!(Verdict { min_speedup: 1.4, ..v.clone() }.gpu_wins());
        let v = Verdict { min_speedup: 1.6, ..v };
        assert!(!v.gpu_wins());
        assert!(v.describe().ends_with(", the GPU to be 1.60x faster (gpu.cost.min_speedup)"), "{}", v.describe());
    }
}
