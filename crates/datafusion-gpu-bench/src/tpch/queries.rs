//! The query texts of `tpch/queries/`: the 22 TPC-H queries with the specification's validation
//! parameters and the 13 SSB queries, compiled into the binary.

use super::Suite;

/// One benchmark query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Query {
    pub suite: Suite,
    /// `q1` .. `q22` for TPC-H, `q1.1` .. `q4.3` for SSB.
    pub name: &'static str,
    pub sql: &'static str,
}

macro_rules! queries {
    ($suite:expr, $dir:literal, [$($name:literal),* $(,)?]) => {
        &[$(Query { suite: $suite, name: $name, sql: include_str!(concat!("../../tpch/queries/", $dir, "/", $name, ".sql")) }),*]
    };
}
/// The 22 TPC-H queries.
pub const TPCH: &[Query] = queries!(
    Suite::Tpch,
    "tpch",
    [
        "q1", "q2", "q3", "q4", "q5", "q6", "q7", "q8", "q9", "q10", "q11", "q12", "q13", "q14", "q15", "q16", "q17",
        "q18", "q19", "q20", "q21", "q22"
    ]
);

/// The 13 SSB queries.
pub const SSB: &[Query] = queries!(
    Suite::Ssb,
    "ssb",
    ["q1.1", "q1.2", "q1.3", "q2.1", "q2.2", "q2.3", "q3.1", "q3.2", "q3.3", "q3.4", "q4.1", "q4.2", "q4.3"]
);

/// The queries of `suite` named in `selection` (`1,3,q5`, `1.1,q2.3`; empty: all of them).
pub fn select(suite: Suite, selection: &[String]) -> datafusion::error::Result<Vec<Query>> {
    let all = match suite {
        Suite::Tpch => TPCH,
        Suite::Ssb => SSB,
    };
    if selection.is_empty() {
        return Ok(all.to_vec());
    }
    selection
        .iter()
        .map(|s| {
            let s = s.trim().to_ascii_lowercase();
            let name = if s.starts_with('q') { s.clone() } else { format!("q{s}") };
            all.iter().find(|q| q.name == name).copied().ok_or_else(|| {
                let names = all.iter().map(|q| q.name).collect::<Vec<_>>().join(", ");
                datafusion::error::DataFusionError::Configuration(format!(
                    "no {} query named '{s}'; the queries are {names}",
                    suite.name()
                ))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_query_is_present_and_selectable() {
        assert_eq!(TPCH.len(), 22);
        assert_eq!(SSB.len(), 13);
        for q in TPCH.iter().chain(SSB) {
            assert!(q.sql.to_ascii_lowercase().contains("select"), "{}", q.name);
        }
        let picked = select(Suite::Tpch, &["1".into(), "q22".into()]).unwrap();
        assert_eq!(picked.iter().map(|q| q.name).collect::<Vec<_>>(), ["q1", "q22"]);
        let picked = select(Suite::Ssb, &["2.3".into()]).unwrap();
        assert_eq!(picked[0].name, "q2.3");
        let err = select(Suite::Ssb, &["9.9".into()]).unwrap_err().to_string();
        assert!(err.contains("q1.1"), "{err}");
    }
}
