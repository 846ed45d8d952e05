//! The query texts of `tpch/queries/`: the 22 TPC-H queries with the specification's validation
//! parameters and the 13 SSB queries, compiled into the binary. TPC-H Q11's FRACTION depends on
//! the scale factor: [`select`] sets it.

use std::borrow::Cow;

use super::Suite;

/// One benchmark query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    pub suite: Suite,
    /// `q1` .. `q22` for TPC-H, `q1.1` .. `q4.3` for SSB.
    pub name: &'static str,
    pub sql: Cow<'static, str>,
}

/// Q11's FRACTION as its text holds it, for scale factor 1.
const Q11_FRACTION_AT_SF1: &str = "sum(ps_supplycost * ps_availqty) * 0.0001";

/// TPC-H Q11's FRACTION at scale factor `sf`: 0.0001 / SF (the specification's 2.4.11.3), as a
/// decimal literal. With 0.0001 at every scale factor the query returns no rows from SF 10 on.
pub fn q11_fraction(sf: f64) -> String {
    let digits = format!("{:.15}", 0.0001 / sf);
    digits.trim_end_matches('0').trim_end_matches('.').to_string()
}

impl Query {
    /// The query as run at scale factor `sf`.
    fn at_scale(mut self, sf: f64) -> datafusion::error::Result<Query> {
        if self.suite == Suite::Tpch && self.name == "q11" {
            if !self.sql.contains(Q11_FRACTION_AT_SF1) {
                return Err(datafusion::error::DataFusionError::Internal(
                    "q11.sql no longer holds its FRACTION as the runner sets it".into(),
                ));
            }
            let at = format!("sum(ps_supplycost * ps_availqty) * {}", q11_fraction(sf));
            self.sql = Cow::Owned(self.sql.replace(Q11_FRACTION_AT_SF1, &at));
        }
        Ok(self)
    }
}

macro_rules! queries {
    ($suite:expr, $dir:literal, [$($name:literal),* $(,)?]) => {
        &[$(Query { suite: $suite, name: $name, sql: Cow::Borrowed(include_str!(concat!("../../tpch/queries/", $dir, "/", $name, ".sql"))) }),*]
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

/// The queries of `suite` named in `selection` (`1,3,q5`, `1.1,q2.3`; empty: all of them), as
/// run at scale factor `sf`.
pub fn select(suite: Suite, selection: &[String], sf: f64) -> datafusion::error::Result<Vec<Query>> {
    named(suite, selection)?.into_iter().map(|q| q.at_scale(sf)).collect()
}

fn named(suite: Suite, selection: &[String]) -> datafusion::error::Result<Vec<Query>> {
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
            all.iter().find(|q| q.name == name).cloned().ok_or_else(|| {
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
        let picked = select(Suite::Tpch, &["1".into(), "q22".into()], 1.0).unwrap();
        assert_eq!(picked.iter().map(|q| q.name).collect::<Vec<_>>(), ["q1", "q22"]);
        let picked = select(Suite::Ssb, &["2.3".into()], 1.0).unwrap();
        assert_eq!(picked[0].name, "q2.3");
        let err = select(Suite::Ssb, &["9.9".into()], 1.0).unwrap_err().to_string();
        assert!(err.contains("q1.1"), "{err}");
    }

    #[test]
    fn q11_takes_its_fraction_from_the_scale_factor() {
        assert_eq!(q11_fraction(1.0), "0.0001");
        assert_eq!(q11_fraction(10.0), "0.00001");
        assert_eq!(q11_fraction(100.0), "0.000001");
        assert_eq!(q11_fraction(0.1), "0.001");
        let q11 = |sf| select(Suite::Tpch, &["11".into()], sf).unwrap().remove(0).sql.into_owned();
        assert!(q11(1.0).contains("* 0.0001\n"), "{}", q11(1.0));
        assert!(q11(30.0).contains("* 0.00000333333333"), "{}", q11(30.0));
        assert!(q11(10.0).contains("* 0.00001\n") && !q11(10.0).contains("* 0.0001\n"), "{}", q11(10.0));
        // The other queries are their files' text at every scale factor.
        let q1 = select(Suite::Tpch, &["1".into()], 100.0).unwrap().remove(0);
        assert_eq!(q1.sql, TPCH[0].sql);
    }
}
