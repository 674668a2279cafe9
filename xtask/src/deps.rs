//! `cargo xtask deps`: proves that the file-level modules of sonic-probe and
//! sonic-probe-common import each other without circles,
//! so that each file can be read, tested and changed knowing only the files
//! below it. `cargo xtask test` runs it, and so does a unit test of xtask
//! (`cargo test --workspace`), so a new circle fails the tests.
//!
//! Each `.rs` file is a module (`probe/mod.rs` is `probe`, `probe/targets.rs`
//! is `probe::targets`). A module depends on another when it names it or an
//! item of it outside `#[cfg(test)]` code: in a `use` (including `pub use`
//! re-exports), or in a path written inline (`crate::cli::one_line(..)`,
//! `super::ProbeError`, `targets::TargetMaps` for a child module). Paths are
//! followed through re-exports (`crate::SharedStruct` is `cgen`'s when
//! lib.rs says `pub use cgen::SharedStruct`) to the file that defines the
//! item. A submodule is part of its parent, so a submodule naming an
//! ancestor (`super::Settings`) is not counted; the parent naming its parts
//! is. Tests may use anything: they are not part of the module graph.
//!
//! This is a lexical reading, not rustc's name resolution: enough for code
//! written the way this workspace writes it, and it errs on the side of
//! seeing an edge (any path that reaches a module file counts).

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

use anyhow::{bail, Context, Result};

/// The crates whose modules must not import each other in circles.
pub const CRATES: &[&str] = &["sonic-probe", "sonic-probe-common"];

/// `cargo xtask deps [--verbose]`: checks every crate, prints the result
/// (with --verbose every module's imports), fails on a circle.
pub fn run(workspace: &Path, args: &[String]) -> Result<()> {
    let verbose = args.iter().any(|a| a == "--verbose" || a == "-v");
    let mut failed = Vec::new();
    for name in CRATES {
        let graph = ModuleGraph::read(&workspace.join(name).join("src"))?;
        if verbose {
            for (from, to) in &graph.edges {
                let targets: Vec<String> = to.keys().map(|t| graph.file_of(t)).collect();
                println!("{name}: {} -> {}", graph.file_of(from), targets.join(", "));
            }
        }
        let circles = graph.circles();
        if circles.is_empty() {
            println!(
                "{name}: {} modules, {} imports between them, no circles",
                graph.modules.len(),
                graph.edge_count()
            );
        } else {
            println!("{name}: {} import circle(s):", circles.len());
            for c in &circles {
                println!("{}", graph.describe(c));
            }
            failed.push(*name);
        }
    }
    if !failed.is_empty() {
        bail!("modules import each other in circles in {}", failed.join(", "));
    }
    Ok(())
}

/// One source file as a module.
struct Module {
    file: PathBuf,
    /// Code with comments, literals and `#[cfg(test)]` items blanked out;
    /// offsets and line numbers are the file's.
    code: String,
    /// Names of the items the file defines (fn, struct, const, mod, ...).
    defines: BTreeSet<String>,
    /// `pub use` re-exports: name -> the absolute path it stands for
    /// (`*` for a glob).
    reexports: Vec<(String, Vec<String>)>,
}

/// The modules of one crate and which depends on which.
pub struct ModuleGraph {
    /// Module path ("" for the crate root, "probe::targets") -> module.
    modules: BTreeMap<String, Module>,
    /// from -> to -> the first place (file:line) the dependency is written.
    edges: BTreeMap<String, BTreeMap<String, String>>,
    /// Names of `#[macro_export]` macros -> the module defining them.
    exported_macros: BTreeMap<String, String>,
    /// The directory file names are shown relative to (the workspace).
    shown_from: PathBuf,
}

impl ModuleGraph {
    /// Reads every module of the crate whose `src` directory is `src`.
    pub fn read(src: &Path) -> Result<Self> {
        let mut modules = BTreeMap::new();
        let mut exported_macros = BTreeMap::new();
        for file in rs_files(src)? {
            let rel = file.strip_prefix(src).expect("under src");
            let Some(path) = module_path(rel) else { continue };
            let text = std::fs::read_to_string(&file).with_context(|| format!("{}", file.display()))?;
            let code = strip_tests(&blank_comments_and_literals(&text));
            let tokens = tokenize(&code);
            let mut defines = BTreeSet::new();
            for w in tokens.windows(3) {
                let kw = w[0].1.as_str();
                if matches!(
                    kw,
                    "fn" | "struct" | "enum" | "const" | "static" | "trait" | "type" | "union" | "mod"
                ) && is_ident(&w[1].1)
                {
                    defines.insert(w[1].1.clone());
                }
                if kw == "macro_rules" && w[1].1 == "!" && is_ident(&w[2].1) {
                    defines.insert(w[2].1.clone());
                    let before = &code[..w[0].0];
                    if before.trim_end().ends_with("#[macro_export]") {
                        exported_macros.insert(w[2].1.clone(), path.clone());
                    }
                }
            }
            modules.insert(path, Module { file, code, defines, reexports: Vec::new() });
        }
        let shown_from = src.parent().and_then(Path::parent).unwrap_or(src).to_path_buf();
        let mut graph = ModuleGraph { modules, edges: BTreeMap::new(), exported_macros, shown_from };
        let names: Vec<String> = graph.modules.keys().cloned().collect();
        // Re-exports first: resolving other paths follows them.
        for m in &names {
            let uses = use_declarations(&graph.modules[m].code);
            let reexports = uses
                .iter()
                .filter(|u| u.public)
                .flat_map(|u| u.paths.iter())
                .map(|(alias, p)| (alias.clone(), graph.absolute(m, p)))
                .collect();
            graph.modules.get_mut(m).expect("module").reexports = reexports;
        }
        for m in &names {
            let code = graph.modules[m].code.clone();
            let uses = use_declarations(&code);
            let mut aliases: BTreeMap<String, Vec<String>> = BTreeMap::new();
            let mut found: Vec<(Vec<String>, usize)> = Vec::new();
            for u in &uses {
                for (alias, p) in &u.paths {
                    let abs = graph.absolute(m, p);
                    if abs.first().map(String::as_str) == Some("crate") {
                        aliases.insert(alias.clone(), abs.clone());
                        found.push((abs, u.offset));
                    }
                }
            }
            // Paths written inline, outside `use` declarations.
            let tokens = tokenize(&blank_ranges(&code, uses.iter().map(|u| (u.offset, u.end))));
            let mut i = 0;
            while i < tokens.len() {
                let start = i;
                let mut path = vec![tokens[i].1.clone()];
                while i + 2 < tokens.len() && tokens[i + 1].1 == "::" && is_ident(&tokens[i + 2].1) {
                    path.push(tokens[i + 2].1.clone());
                    i += 2;
                }
                i += 1;
                let preceded_by_colons = start > 0 && tokens[start - 1].1 == "::";
                if path.len() < 2 || preceded_by_colons {
                    continue;
                }
                let first = path[0].as_str();
                let abs = if matches!(first, "crate" | "$crate" | "super" | "self") {
                    graph.absolute(m, &path)
                } else if let Some(a) = aliases.get(first) {
                    a.iter().cloned().chain(path[1..].iter().cloned()).collect()
                } else if graph.modules.contains_key(&join(m, first)) {
                    graph.absolute(m, &path)
                } else {
                    continue;
                };
                found.push((abs, tokens[start].0));
            }
            for (abs, offset) in found {
                if let Some(to) = graph.resolve(&abs, 0) {
                    graph.add_edge(m, &to, offset);
                }
            }
        }
        Ok(graph)
    }

    fn add_edge(&mut self, from: &str, to: &str, offset: usize) {
        let is_ancestor = to.is_empty() || from == to || from.starts_with(&format!("{to}::"));
        if is_ancestor {
            return;
        }
        let module = &self.modules[from];
        let line = module.code[..offset].matches('\n').count() + 1;
        let file = module.file.strip_prefix(&self.shown_from).unwrap_or(&module.file);
        let place = format!("{}:{line}", file.display());
        self.edges.entry(from.to_string()).or_default().entry(to.to_string()).or_insert(place);
    }

    fn edge_count(&self) -> usize {
        self.edges.values().map(BTreeMap::len).sum()
    }

    /// A path as written in module `m`, made absolute (`crate`, then names).
    fn absolute(&self, m: &str, path: &[String]) -> Vec<String> {
        let mut base: Vec<String> = m.split("::").filter(|s| !s.is_empty()).map(String::from).collect();
        let mut rest = path;
        match rest.first().map(String::as_str) {
            Some("crate" | "$crate") => {
                base.clear();
                rest = &rest[1..];
            }
            Some("self") => rest = &rest[1..],
            Some("super") => {
                while rest.first().map(String::as_str) == Some("super") {
                    base.pop();
                    rest = &rest[1..];
                }
            }
            // A child module named without `self::` (2018 paths).
            Some(first) if self.modules.contains_key(&join(m, first)) => {}
            _ => return path.to_vec(), // another crate
        }
        std::iter::once("crate".to_string()).chain(base).chain(rest.iter().cloned()).collect()
    }

    /// The module that defines what an absolute path names, following
    /// re-exports; None for other crates.
    fn resolve(&self, abs: &[String], depth: usize) -> Option<String> {
        if abs.first().map(String::as_str) != Some("crate") || depth > 8 {
            return None;
        }
        let mut module = String::new();
        let mut i = 1;
        while i < abs.len() && self.modules.contains_key(&join(&module, &abs[i])) {
            module = join(&module, &abs[i]);
            i += 1;
        }
        let Some(item) = abs.get(i) else { return Some(module) };
        let m = &self.modules[&module];
        if m.defines.contains(item) {
            return Some(module);
        }
        if module.is_empty() {
            if let Some(defining) = self.exported_macros.get(item) {
                return Some(defining.clone());
            }
        }
        for (alias, target) in &m.reexports {
            if alias == item {
                return self.resolve(target, depth + 1);
            }
            if alias == "*" {
                let mut via = target[..target.len() - 1].to_vec();
                via.push(item.clone());
                if let Some(found) = self.resolve(&via, depth + 1) {
                    if self.modules[&found].defines.contains(item) {
                        return Some(found);
                    }
                }
            }
        }
        Some(module)
    }

    /// Strongly connected components of more than one module: each is a
    /// set of modules that import each other in a circle.
    pub fn circles(&self) -> Vec<Vec<String>> {
        let names: Vec<&String> = self.modules.keys().collect();
        let reach = |from: &String| -> BTreeSet<String> {
            let mut seen = BTreeSet::new();
            let mut stack = vec![from.clone()];
            while let Some(n) = stack.pop() {
                for to in self.edges.get(&n).into_iter().flat_map(|e| e.keys()) {
                    if seen.insert(to.clone()) {
                        stack.push(to.clone());
                    }
                }
            }
            seen
        };
        let reachable: BTreeMap<&String, BTreeSet<String>> = names.iter().map(|n| (*n, reach(n))).collect();
        let mut done = BTreeSet::new();
        let mut circles = Vec::new();
        for n in &names {
            if done.contains(*n) || !reachable[n].contains(*n) {
                continue;
            }
            let component: Vec<String> = names
                .iter()
                .filter(|m| reachable[n].contains(**m) && reachable[*m].contains(*n))
                .map(|m| m.to_string())
                .collect();
            done.extend(component.iter().cloned());
            circles.push(component);
        }
        circles
    }

    /// A circle's modules and the import edges between them, with where
    /// each is written.
    fn describe(&self, circle: &[String]) -> String {
        let mut out =
            format!("  circle: {}\n", circle.iter().map(|m| self.file_of(m)).collect::<Vec<_>>().join(", "));
        for from in circle {
            for (to, place) in self.edges.get(from).into_iter().flatten() {
                if circle.contains(to) {
                    out.push_str(&format!("    {} -> {} ({place})\n", self.file_of(from), self.file_of(to)));
                }
            }
        }
        out
    }

    fn file_of(&self, m: &str) -> String {
        let f = &self.modules[m].file;
        let src = f.ancestors().find(|a| a.ends_with("src")).unwrap_or(f);
        f.strip_prefix(src).unwrap_or(f).display().to_string()
    }
}

fn join(module: &str, name: &str) -> String {
    if module.is_empty() {
        name.to_string()
    } else {
        format!("{module}::{name}")
    }
}

fn rs_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("{}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            out.extend(rs_files(&path)?);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
    Ok(out)
}

/// `lib.rs` -> "", `a.rs` -> "a", `a/mod.rs` -> "a", `a/b.rs` -> "a::b";
/// None for a binary's root (main.rs, bin/), another crate.
fn module_path(rel: &Path) -> Option<String> {
    let parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if parts[0] == "main.rs" || parts[0] == "bin" {
        return None;
    }
    let mut names: Vec<String> = parts.iter().map(|p| p.trim_end_matches(".rs").to_string()).collect();
    if matches!(names.last().map(String::as_str), Some("mod" | "lib")) {
        names.pop();
    }
    Some(names.join("::"))
}

fn is_ident(s: &str) -> bool {
    let mut c = s.chars();
    c.next().is_some_and(|f| f.is_alphabetic() || f == '_' || f == '$')
        && c.all(|c| c.is_alphanumeric() || c == '_')
}

/// Identifiers, `::` and single punctuation characters, with their offsets.
fn tokenize(code: &str) -> Vec<(usize, String)> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i] as char;
        if c.is_ascii_alphabetic() || c == '_' || c == '$' {
            let s = i;
            i += 1;
            while i < b.len() && ((b[i] as char).is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push((s, code[s..i].to_string()));
        } else if c == ':' && b.get(i + 1) == Some(&b':') {
            out.push((i, "::".into()));
            i += 2;
        } else if c.is_ascii_whitespace() || !c.is_ascii() {
            i += 1;
        } else {
            out.push((i, c.to_string()));
            i += 1;
        }
    }
    out
}

/// The text with comments, string and char literals replaced by spaces
/// (newlines kept, so offsets and lines stay the file's).
fn blank_comments_and_literals(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for x in &mut out[from..to.min(b.len())] {
            if *x != b'\n' {
                *x = b' ';
            }
        }
    };
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                let end = text[i..].find('\n').map_or(b.len(), |n| i + n);
                blank(&mut out, i, end);
                i = end;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let (mut depth, mut j) = (1, i + 2);
                while j < b.len() && depth > 0 {
                    if b[j] == b'/' && b.get(j + 1) == Some(&b'*') {
                        depth += 1;
                        j += 1;
                    } else if b[j] == b'*' && b.get(j + 1) == Some(&b'/') {
                        depth -= 1;
                        j += 1;
                    }
                    j += 1;
                }
                blank(&mut out, i, j);
                i = j;
            }
            b'r' if (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#'))
                && (i == 0 || !(b[i - 1] as char).is_ascii_alphanumeric() && b[i - 1] != b'_') =>
            {
                let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
                if b.get(i + 1 + hashes) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                let close = format!("\"{}", "#".repeat(hashes));
                let body = i + 2 + hashes;
                let end = text[body..].find(&close).map_or(b.len(), |n| body + n + close.len());
                blank(&mut out, i, end);
                i = end;
            }
            b'"' => {
                let mut j = i + 1;
                while j < b.len() && b[j] != b'"' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                blank(&mut out, i, j + 1);
                i = j + 1;
            }
            b'\'' => {
                // A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
                let end = if b.get(i + 1) == Some(&b'\\') {
                    text[i + 2..].find('\'').map(|n| i + 2 + n + 1)
                } else {
                    let ch_len = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                    (b.get(i + 1 + ch_len) == Some(&b'\'')).then_some(i + 2 + ch_len)
                };
                match end {
                    Some(end) => {
                        blank(&mut out, i, end);
                        i = end;
                    }
                    None => i += 1,
                }
            }
            _ => i += 1,
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Blanks each item marked `#[cfg(test)]` (to its closing brace or `;`).
fn strip_tests(code: &str) -> String {
    let mut out = code.to_string();
    let mut from = 0;
    while let Some(n) = out[from..].find("#[cfg(test)]") {
        let start = from + n;
        let b = out.as_bytes();
        let mut j = start + "#[cfg(test)]".len();
        let mut depth = 0;
        while j < b.len() {
            match b[j] {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        j += 1;
                        break;
                    }
                }
                b';' if depth == 0 => {
                    j += 1;
                    break;
                }
                _ => {}
            }
            j += 1;
        }
        out = blank_ranges(&out, [(start, j)]);
        from = j.min(out.len());
    }
    out
}

fn blank_ranges(code: &str, ranges: impl IntoIterator<Item = (usize, usize)>) -> String {
    let mut b = code.as_bytes().to_vec();
    for (from, to) in ranges {
        for x in &mut b[from..to.min(code.len())] {
            if *x != b'\n' {
                *x = b' ';
            }
        }
    }
    String::from_utf8_lossy(&b).into_owned()
}

/// One `use` declaration: the paths it imports, each with the name it
/// binds (`*` for a glob).
struct UseDecl {
    public: bool,
    offset: usize,
    end: usize,
    paths: Vec<(String, Vec<String>)>,
}

fn use_declarations(code: &str) -> Vec<UseDecl> {
    let tokens = tokenize(code);
    let mut out = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        if tokens[i].1 != "use" {
            i += 1;
            continue;
        }
        // `pub use`, `pub(crate) use`.
        let public = i >= 1
            && (tokens[i - 1].1 == "pub" || (i >= 4 && tokens[i - 1].1 == ")" && tokens[i - 4].1 == "pub"));
        let start = tokens[i].0;
        let mut j = i + 1;
        while j < tokens.len() && tokens[j].1 != ";" {
            j += 1;
        }
        let tree: Vec<&str> = tokens[i + 1..j].iter().map(|t| t.1.as_str()).collect();
        let mut paths = Vec::new();
        expand_use_tree(&tree, &[], &mut paths);
        let end = tokens.get(j).map_or(code.len(), |t| t.0 + 1);
        out.push(UseDecl { public, offset: start, end, paths });
        i = j + 1;
    }
    out
}

/// Expands `a::{b, c::{d as e, *}, self}` into (bound name, path) pairs.
fn expand_use_tree(tree: &[&str], prefix: &[String], out: &mut Vec<(String, Vec<String>)>) {
    // Split at top-level commas.
    let mut depth = 0;
    let mut start = 0;
    for (k, t) in tree.iter().enumerate() {
        match *t {
            "{" => depth += 1,
            "}" => depth -= 1,
            "," if depth == 0 => {
                expand_one(&tree[start..k], prefix, out);
                start = k + 1;
            }
            _ => {}
        }
    }
    expand_one(&tree[start..], prefix, out);
}

fn expand_one(item: &[&str], prefix: &[String], out: &mut Vec<(String, Vec<String>)>) {
    let mut path = prefix.to_vec();
    let mut k = 0;
    while k < item.len() {
        match item[k] {
            "::" => k += 1,
            "{" => {
                let inner = &item[k + 1..item.len() - 1];
                expand_use_tree(inner, &path, out);
                return;
            }
            "*" => {
                path.push("*".into());
                out.push(("*".into(), path));
                return;
            }
            "as" => {
                if let Some(alias) = item.get(k + 1) {
                    out.push((alias.to_string(), path));
                }
                return;
            }
            "self" if !path.is_empty() => k += 1,
            name => {
                path.push(name.to_string());
                k += 1;
            }
        }
    }
    if let Some(last) = path.last() {
        out.push((last.clone(), path));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workspace_has_no_import_circles() {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        for name in CRATES {
            let graph = ModuleGraph::read(&workspace.join(name).join("src")).unwrap();
            let circles: Vec<String> = graph.circles().iter().map(|c| graph.describe(c)).collect();
            assert!(circles.is_empty(), "{name}:\n{}", circles.join(""));
            assert!(graph.edge_count() > 5, "{name}: the checker saw no imports");
        }
    }

    fn graph_of(files: &[(&str, &str)]) -> ModuleGraph {
        let dir =
            std::env::temp_dir().join(format!("xtask-deps-{}-{}", std::process::id(), files[0].1.len()));
        let _ = std::fs::remove_dir_all(&dir);
        for (path, text) in files {
            let p = dir.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        let g = ModuleGraph::read(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        g
    }

    #[test]
    fn sees_circles_through_uses_inline_paths_and_reexports() {
        let g = graph_of(&[
            ("lib.rs", "pub mod a; pub mod b; pub mod c; pub mod p;\npub use p::Thing;\n"),
            ("a.rs", "use crate::b::{self, Bee};\nfn f() {}\n"),
            ("b.rs", "pub struct Bee;\nfn g() { crate::c::go(); }\n"),
            // Through the crate root's re-export of p's child.
            ("c.rs", "pub fn go() { let _ = crate::Thing; }\n"),
            ("p/mod.rs", "mod kid;\npub use kid::Thing;\n"),
            ("p/kid.rs", "pub struct Thing;\nfn h() { crate::a::f(); let s = \"crate::b::nope\"; }\n"),
        ]);
        let circles = g.circles();
        assert_eq!(circles, vec![vec!["a", "b", "c", "p::kid"]], "{:?}", g.edges);
    }

    #[test]
    fn tests_comments_and_ancestors_are_not_dependencies() {
        let g = graph_of(&[
            ("lib.rs", "pub mod a; pub mod b; pub mod p;\n"),
            ("a.rs", "use crate::b::Bee;\n"),
            ("b.rs", "pub struct Bee;\n// crate::a::x\n#[cfg(test)]\nmod tests { use crate::a::*; }\n"),
            ("p/mod.rs", "mod kid;\npub struct Settings;\npub use kid::Kid;\n"),
            ("p/kid.rs", "use super::Settings;\npub struct Kid;\n"),
        ]);
        assert!(g.circles().is_empty(), "{:?}", g.edges);
        assert_eq!(g.edge_count(), 2, "{:?}", g.edges);
    }
}
