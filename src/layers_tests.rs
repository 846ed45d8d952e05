//! The layering of `src/` (`docs/architecture.md`): a module uses only modules of lower layers
//! and its own files. The table of layers is read from that page, so the page and this check
//! cannot drift apart.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The layer of each module, from the table in `docs/architecture.md`.
fn layers(doc: &str) -> HashMap<String, usize> {
    let mut out = HashMap::new();
    for line in doc.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // "| 5 | `join`, `aggregate` | ... |" splits into ["", "5", "`join`, `aggregate`", ..., ""].
        let Some(layer) = cells.get(1).and_then(|c| c.parse::<usize>().ok()) else { continue };
        for name in cells.get(2).copied().unwrap_or("").split(',') {
            let name = name.trim().trim_matches('`');
            if !name.is_empty() {
                out.insert(name.to_string(), layer);
            }
        }
    }
    out
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The module a file of `src/` belongs to: its folder, or its own name for a file at the top.
fn module_of(rel: &Path) -> Option<String> {
    let first = rel.components().next()?.as_os_str().to_str()?;
    Some(first.trim_end_matches(".rs").to_string())
}

/// The code of `text` that the check reads: no comments, and nothing of a test module at the
/// end of the file.
fn checked_code(text: &str) -> String {
    let text = match text.find("\n#[cfg(test)]\nmod tests {") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The modules `code` names as `crate::<module>`, with the line of each.
fn uses(code: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in code.lines().enumerate() {
        let mut rest = line;
        while let Some(i) = rest.find("crate::") {
            let after = &rest[i + "crate::".len()..];
            let name: String = after.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            if !name.is_empty() {
                out.push((n + 1, name));
            }
            rest = after;
        }
    }
    out
}

/// What `code` of module `module` uses from a layer above its own (or an unlisted module).
fn violations(file: &str, module: &str, code: &str, layers: &HashMap<String, usize>) -> Vec<String> {
    let Some(&own) = layers.get(module) else {
        return vec![format!("{file}: module `{module}` is not in docs/architecture.md's table of layers")];
    };
    uses(code)
        .into_iter()
        .filter(|(_, used)| used != module)
        .filter_map(|(line, used)| match layers.get(&used) {
            Some(&layer) if layer < own => None,
            Some(&layer) => {
                Some(format!("{file}:{line}: `{module}` (layer {own}) uses `crate::{used}` (layer {layer})"))
            }
            None => Some(format!("{file}:{line}: `crate::{used}` is not in docs/architecture.md's table of layers")),
        })
        .collect()
}

#[test]
fn no_module_uses_a_layer_above() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).expect("docs/architecture.md");
    let layers = layers(&doc);
    assert!(layers.len() > 10, "no table of layers found in docs/architecture.md: {layers:?}");
    let src = root.join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut found = Vec::new();
    for path in files {
        let rel = path.strip_prefix(&src).expect("a file under src/");
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        // The binary uses the library by its name; test files may drive the whole stack.
        if rel.starts_with("bin") || name == "tests.rs" || name.ends_with("_tests.rs") {
            continue;
        }
        let Some(module) = module_of(rel) else { continue };
        let text = std::fs::read_to_string(&path).expect("a source file");
        found.extend(violations(&rel.display().to_string(), &module, &checked_code(&text), &layers));
    }
    assert!(found.is_empty(), "imports that run up the layers:\n{}", found.join("\n"));
}

/// The check itself: an upward use is found, a downward one, a comment and a test module are not.
#[test]
fn the_layer_check_finds_upward_uses() {
    let layers =
        layers("| layer | modules |\n|---|---|\n| 0 | `config` |\n| 1 | `device` |\n| 2 | `join`, `aggregate` |\n");
    assert_eq!(layers.get("aggregate"), Some(&2));
    let code = "use crate::config::X;\nuse crate::join::Y; // crate::rule\nfn f() { crate::device::z() }\n";
    let v = violations("f.rs", "device", &checked_code(code), &layers);
    assert_eq!(v, vec!["f.rs:2: `device` (layer 1) uses `crate::join` (layer 2)".to_string()]);
    let same_layer = violations("g.rs", "aggregate", "use crate::join::K;", &layers);
    assert_eq!(same_layer.len(), 1, "{same_layer:?}");
    let tested = checked_code("use crate::config::X;\n#[cfg(test)]\nmod tests {\n    use crate::join::T;\n}\n");
    assert!(violations("h.rs", "device", &tested, &layers).is_empty());
    assert_eq!(violations("i.rs", "device", "crate::nowhere::f()", &layers).len(), 1);
}

/// Execs do not consult the cost model in `execute`: run-time choices go through the estimate
/// the rule handed them (`Estimate::choose_for_*`), and fused uploads are priced by the rule.
#[test]
fn execs_do_not_load_or_run_the_cost_model() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/exec");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let mut found = Vec::new();
    for path in files {
        let code = checked_code(&std::fs::read_to_string(&path).expect("a source file"));
        for needle in ["profile::load", "join::choose(", "aggregate::choose(", "agg_cost::choose("] {
            if code.contains(needle) {
                found.push(format!("{}: {needle}", path.display()));
            }
        }
    }
    assert!(found.is_empty(), "execs that consult the cost model themselves:\n{}", found.join("\n"));
}
