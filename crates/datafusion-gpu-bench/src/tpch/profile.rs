//! `bench tpch|ssb --profile DIR`: a query's runs with the GPU rule under a sampling profiler of
//! the process's threads (pprof's, on `SIGPROF`), for where the host's time goes in a query
//! whose device work is far below its wall time. Its files, per query:
//!
//! - `<stem>.folded`: one line per distinct stack, `thread;outermost;...;innermost samples`
//!   (the input of flame-graph tools);
//! - `<stem>.svg`: the flame graph;
//! - `<stem>.top.txt`: the functions with the most samples, inclusive (on the stack) and
//!   exclusive (innermost), each as a share of all samples.
//!
//! Samples come from `ITIMER_PROF`, which counts the process's CPU time, all threads together:
//! a thread waiting in a blocking call takes none, one spinning (the CUDA driver's default wait
//! for a stream when cores outnumber contexts) takes its share. Signals due while one is still
//! pending merge, so when many threads run at once the counts fall short of their CPU time: the
//! shares, not the totals, are what to read, and a query mostly waiting on the device shows
//! few samples. The profiler is in binaries built with the `profile` feature only (its
//! dependencies change features of crates DataFusion shares, so building it rebuilds those).

use std::path::{Path, PathBuf};

use datafusion::error::{DataFusionError, Result};
use datafusion::prelude::SessionContext;

/// Samples a second of the process's CPU time (all its threads together: `ITIMER_PROF`).
pub const FREQUENCY: i32 = 999;

/// What a profile of a query found, for the runner's line.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Profiled {
    pub samples: i64,
    pub files: Vec<PathBuf>,
}

/// Runs `sql` `runs` times on `ctx` under the profiler, then writes its files as `dir/stem.*`.
#[cfg(feature = "profile")]
pub async fn profile(ctx: &SessionContext, sql: &str, runs: usize, dir: &Path, stem: &str) -> Result<Profiled> {
    let fail = |what: &str, e: &dyn std::fmt::Display| DataFusionError::Execution(format!("profiling: {what}: {e}"));
    std::fs::create_dir_all(dir).map_err(|e| fail(&format!("creating {}", dir.display()), &e))?;
    let guard = pprof::ProfilerGuardBuilder::default()
        .frequency(FREQUENCY)
        // Unwinding from inside these can deadlock in the signal handler.
        .blocklist(&["libc", "libgcc", "pthread", "vdso"])
        .build()
        .map_err(|e| fail("starting the profiler", &e))?;
    for _ in 0..runs.max(1) {
        ctx.sql(sql).await?.collect().await?;
    }
    let report = guard.report().build().map_err(|e| fail("building the report", &e))?;
    drop(guard);
    let stacks: Vec<(Vec<String>, i64)> = report
        .data
        .iter()
        .map(|(frames, &count)| {
            let mut names = vec![thread_kind(&frames.thread_name)];
            names.extend(frames.frames.iter().rev().flat_map(|f| f.iter().rev().map(|s| short_name(&s.to_string()))));
            (names, count as i64)
        })
        .collect();
    let folded = dir.join(format!("{stem}.folded"));
    let mut lines: Vec<String> = stacks.iter().map(|(names, n)| format!("{} {n}", names.join(";"))).collect();
    lines.sort();
    std::fs::write(&folded, lines.join("\n") + "\n").map_err(|e| fail(&format!("writing {}", folded.display()), &e))?;
    let svg = dir.join(format!("{stem}.svg"));
    let file = std::fs::File::create(&svg).map_err(|e| fail(&format!("creating {}", svg.display()), &e))?;
    report.flamegraph(file).map_err(|e| fail("drawing the flame graph", &e))?;
    let top = dir.join(format!("{stem}.top.txt"));
    let samples: i64 = stacks.iter().map(|(_, n)| n).sum();
    std::fs::write(&top, top_functions(&stacks, 40)).map_err(|e| fail(&format!("writing {}", top.display()), &e))?;
    Ok(Profiled { samples, files: vec![folded, svg, top] })
}

#[cfg(not(feature = "profile"))]
pub async fn profile(_ctx: &SessionContext, _sql: &str, _runs: usize, _dir: &Path, _stem: &str) -> Result<Profiled> {
    Err(unavailable())
}

/// Whether this binary has the profiler: an error saying how to build one when not, for the
/// runner to give before it loads any data.
pub fn available() -> Result<()> {
    match cfg!(feature = "profile") {
        true => Ok(()),
        false => Err(unavailable()),
    }
}

#[cfg_attr(feature = "profile", allow(dead_code))]
fn unavailable() -> DataFusionError {
    DataFusionError::Configuration(
        "--profile needs a binary built with the `profile` feature: cargo build --release -p datafusion-gpu-cli --features profile".into(),
    )
}

#[cfg_attr(not(feature = "profile"), allow(dead_code))]
/// Threads by what they are: tokio's workers and blocking threads share a name, rayon's are
/// numbered; the number says nothing here.
fn thread_kind(name: &str) -> String {
    let trimmed = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '-' || c == '_');
    if trimmed.is_empty() { "thread".into() } else { trimmed.to_string() }
}

#[cfg_attr(not(feature = "profile"), allow(dead_code))]
/// A symbol without its hash suffix (`::h0123456789abcdef`), which splits one function's samples
/// over its monomorphised copies' names otherwise.
fn short_name(symbol: &str) -> String {
    match symbol.rsplit_once("::h") {
        Some((head, hash)) if hash.len() == 16 && hash.chars().all(|c| c.is_ascii_hexdigit()) => head.to_string(),
        _ => symbol.to_string(),
    }
}

/// The `n` functions with the most samples on the stack (each counted once a stack) and as the
/// innermost frame, as text.
pub fn top_functions(stacks: &[(Vec<String>, i64)], n: usize) -> String {
    use std::collections::{HashMap, HashSet};
    let total: i64 = stacks.iter().map(|(_, c)| c).sum::<i64>().max(1);
    let mut inclusive: HashMap<&str, i64> = HashMap::new();
    let mut exclusive: HashMap<&str, i64> = HashMap::new();
    for (names, count) in stacks {
        // The thread's kind is the first name; a function recursing is counted once.
        let mut seen = HashSet::new();
        for name in names.iter().skip(1) {
            if seen.insert(name.as_str()) {
                *inclusive.entry(name).or_default() += count;
            }
        }
        if let Some(last) = names.last() {
            *exclusive.entry(last).or_default() += count;
        }
    }
    let mut threads: HashMap<&str, i64> = HashMap::new();
    for (names, count) in stacks {
        *threads.entry(names.first().map_or("?", String::as_str)).or_default() += count;
    }
    let table = |title: &str, counts: HashMap<&str, i64>| {
        let mut rows: Vec<(&str, i64)> = counts.into_iter().collect();
        rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let mut text = format!("{title}\n");
        for (name, count) in rows.into_iter().take(n) {
            text.push_str(&format!("{:6.2}% {count:8}  {name}\n", 100.0 * count as f64 / total as f64));
        }
        text
    };
    format!(
        "{total} samples, {FREQUENCY} a second of the process's CPU time (all threads)\n\n{}\n{}\n{}",
        table("by thread kind", threads),
        table("inclusive (on the stack)", inclusive),
        table("exclusive (innermost frame)", exclusive)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_lose_hashes_and_thread_numbers() {
        assert_eq!(short_name("datafusion_gpu::join::probe::h0123456789abcdef"), "datafusion_gpu::join::probe");
        assert_eq!(short_name("a::hello"), "a::hello");
        assert_eq!(thread_kind("tokio-runtime-worker"), "tokio-runtime-worker");
        assert_eq!(thread_kind("rayon-7"), "rayon");
        assert_eq!(thread_kind("42"), "thread");
    }

    #[test]
    fn top_functions_count_each_function_once_a_stack() {
        let stacks = vec![
            (vec!["w".to_string(), "main".into(), "f".into(), "f".into(), "g".into()], 3),
            (vec!["w".to_string(), "main".into(), "h".into()], 1),
        ];
        let text = top_functions(&stacks, 10);
        assert!(text.starts_with("4 samples"), "{text}");
        // `f` recurses: 3 samples, not 6; `main` is on every stack.
        assert!(text.contains("100.00%        4  main"), "{text}");
        assert!(text.contains(" 75.00%        3  f\n"), "{text}");
        let exclusive = text.split("exclusive").nth(1).unwrap_or_default();
        assert!(exclusive.contains(" 75.00%        3  g\n"), "{text}");
        assert!(exclusive.contains(" 25.00%        1  h\n"), "{text}");
    }
}
