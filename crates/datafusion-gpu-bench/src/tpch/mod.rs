//! TPC-H and SSB end to end: data generation (`data`, `ssb`), the query texts of `tpch/queries/`
//! (`queries`), result comparison (`compare`), and the side-by-side CPU/GPU runner behind
//! `datafusion-gpu bench tpch|ssb` (`runner`, `chart`), with another engine beside it (`peer`).

pub mod chart;
pub mod compare;
pub mod concurrency;
pub mod data;
pub mod peer;
pub mod profile;
pub mod queries;
pub mod runner;
pub mod ssb;

/// A benchmark suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Suite {
    Tpch,
    Ssb,
}

impl Suite {
    pub fn name(self) -> &'static str {
        match self {
            Suite::Tpch => "tpch",
            Suite::Ssb => "ssb",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Suite::Tpch => "TPC-H",
            Suite::Ssb => "SSB",
        }
    }

    /// The suite's tables.
    pub fn tables(self) -> &'static [&'static str] {
        match self {
            Suite::Tpch => &["nation", "region", "supplier", "customer", "part", "partsupp", "orders", "lineitem"],
            Suite::Ssb => &["date", "customer", "supplier", "part", "lineorder"],
        }
    }
}
