//! Calibration: the non-negative coefficients that make a model's features best predict
//! measured times, in relative error (a point of 1 ms counts as much as one of 1 s).

/// Solves `min sum_i ((x . f_i - t_i) / t_i)^2` over `x >= 0` for rows `(f_i, t_i)`. Exact for
/// the few features the models have: every subset of free coefficients is solved by least
/// squares and the best non-negative solution kept. Rows with a non-positive time are skipped.
pub fn fit_relative(rows: &[(Vec<f64>, f64)]) -> Vec<f64> {
    let d = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
    let scaled: Vec<Vec<f64>> = rows
        .iter()
        .filter(|(_, t)| *t > 0.0)
        .map(|(f, t)| (0..d).map(|j| f.get(j).copied().unwrap_or(0.0) / t).collect())
        .collect();
    let mut best = (f64::INFINITY, vec![0.0; d]);
    for mask in 1u32..(1 << d) {
        let free: Vec<usize> = (0..d).filter(|j| mask & (1 << j) != 0).collect();
        let Some(sol) = least_squares(&scaled, &free) else { continue };
        if sol.iter().any(|v| *v < 0.0 || !v.is_finite()) {
            continue;
        }
        let mut x = vec![0.0; d];
        for (i, &j) in free.iter().enumerate() {
            x[j] = sol[i];
        }
        let err: f64 = scaled.iter().map(|a| (a.iter().zip(&x).map(|(p, q)| p * q).sum::<f64>() - 1.0).powi(2)).sum();
        if err < best.0 {
            best = (err, x);
        }
    }
    best.1
}

/// Least squares of `a[:, free] x = 1` by the normal equations (Gaussian elimination with
/// partial pivoting); `None` when singular.
fn least_squares(a: &[Vec<f64>], free: &[usize]) -> Option<Vec<f64>> {
    let n = free.len();
    // Columns are scaled to unit norm first: features differ by many orders of magnitude.
    let norms: Vec<f64> = free.iter().map(|&j| a.iter().map(|r| r[j] * r[j]).sum::<f64>().sqrt()).collect();
    if norms.contains(&0.0) {
        return None;
    }
    let mut m = vec![vec![0.0; n + 1]; n];
    for row in a {
        for p in 0..n {
            let ap = row[free[p]] / norms[p];
            for q in 0..n {
                m[p][q] += ap * row[free[q]] / norms[q];
            }
            m[p][n] += ap;
        }
    }
    for c in 0..n {
        let piv = (c..n).max_by(|x, y| m[*x][c].abs().total_cmp(&m[*y][c].abs()))?;
        if m[piv][c].abs() < 1e-12 {
            return None;
        }
        m.swap(c, piv);
        let pivot = m[c].clone();
        for (r, row) in m.iter_mut().enumerate() {
            if r != c {
                let f = row[c] / pivot[c];
                for (x, p) in row.iter_mut().zip(&pivot).skip(c) {
                    *x -= f * p;
                }
            }
        }
    }
    Some((0..n).map(|i| m[i][n] / m[i][i] / norms[i]).collect())
}

/// The median of `|predicted / measured - 1|` over the rows, for reports.
pub fn median_relative_error(rows: &[(Vec<f64>, f64)], x: &[f64]) -> f64 {
    let mut e: Vec<f64> = rows
        .iter()
        .filter(|(_, t)| *t > 0.0)
        .map(|(f, t)| (f.iter().zip(x).map(|(a, b)| a * b).sum::<f64>() / t - 1.0).abs())
        .collect();
    if e.is_empty() {
        return 0.0;
    }
    e.sort_by(|a, b| a.total_cmp(b));
    e[e.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovers_known_coefficients() {
        // t = 2e-4 + 3 f1 + 0.5 f2 over features of very different scales.
        let rows: Vec<(Vec<f64>, f64)> = (0..20)
            .map(|i| {
                let f = vec![1.0, 1e-5 * (i as f64 + 1.0), 1e-3 * ((i * 7 % 11) as f64 + 1.0)];
                let t = 2e-4 * f[0] + 3.0 * f[1] + 0.5 * f[2];
                (f, t)
            })
            .collect();
        let x = fit_relative(&rows);
        for (got, want) in x.iter().zip([2e-4, 3.0, 0.5]) {
            assert!((got - want).abs() <= 1e-6 * want, "{x:?}");
        }
        assert!(median_relative_error(&rows, &x) < 1e-9);
    }

    #[test]
    fn coefficients_stay_non_negative() {
        // The best unconstrained fit has a negative coefficient on the second feature.
        let rows = vec![(vec![1.0, 1.0], 1.0), (vec![1.0, 2.0], 0.9), (vec![1.0, 3.0], 0.8)];
        let x = fit_relative(&rows);
        assert!(x.iter().all(|v| *v >= 0.0), "{x:?}");
        assert!(x[0] > 0.8 && x[0] < 1.0, "{x:?}");
    }
}
