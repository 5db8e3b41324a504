//! Module import circles inside one crate, for `cargo xtask deps`. Cargo sees only crates, so
//! it cannot see that, inside a crate, file A uses an item of file B while B uses one of A:
//! the knot that leaves a reader no bottom to start from. This is a small scan, not a
//! compiler:
//!
//! - The module tree is followed from each library and binary target's root through its
//!   `mod name;` declarations (inline `mod name { … }` blocks count as part of their file).
//!   Modules under `#[cfg(test)]`, and any other item under it, are left out: test code may
//!   reach anywhere.
//! - A file uses another when it names it in a path: `crate::…`, `$crate::…` (macros),
//!   `super::…`, `self::…`, or, from a parent, `child::…`, in `use` trees (groups and globs
//!   included) and in expressions alike. Comments, strings and characters are skipped. A path
//!   resolves to the longest prefix that is a module.
//! - Paths into the crate root are not counted: the root is the crate's front door (its
//!   re-exports, and the main type its modules extend). Everything else is, a child's path
//!   into its parent module included, so a `mod.rs` that both registers its children and
//!   serves them helpers is a circle.
//!
//! A circle is a strongly connected component of more than one file.
//!
//! The same scan lists each target's top-level modules for the other check here:
//! [`code_map_gaps`], that `docs/ARCHITECTURE.md`'s code map names every crate and every
//! top-level module, so a new one cannot go in unmapped.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One source file of a crate.
#[derive(Debug, Clone)]
pub(crate) struct ModFile {
    /// How the file is named in reports (its path from the workspace root).
    pub(crate) name: String,
    /// Its module path from the crate root (empty for the root itself).
    pub(crate) module: Vec<String>,
    /// Its text.
    pub(crate) text: String,
}

/// Reads the module tree of the crate whose root file is `root`; files are named relative to
/// `workspace`.
pub(crate) fn load_tree(root: &Path, workspace: &Path) -> Result<Vec<ModFile>, String> {
    let mut out = Vec::new();
    let mut queue = vec![(root.to_path_buf(), Vec::<String>::new())];
    while let Some((path, module)) = queue.pop() {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        // Children of `a.rs` live in `a/`; those of `lib.rs`, `main.rs` and `mod.rs`
        // beside them (and the root's, whatever its name, beside it).
        let dir = match path.file_stem().and_then(|s| s.to_str()) {
            Some("mod" | "lib" | "main") => path.parent().map(Path::to_path_buf),
            _ if module.is_empty() => path.parent().map(Path::to_path_buf),
            Some(stem) => path.parent().map(|p| p.join(stem)),
            None => None,
        }
        .unwrap_or_default();
        for (scope, child) in scan(&text).children {
            let base: PathBuf = scope.iter().fold(dir.clone(), |d, s| d.join(s));
            let flat = base.join(format!("{child}.rs"));
            let nested = base.join(&child).join("mod.rs");
            let file = if flat.is_file() {
                flat
            } else if nested.is_file() {
                nested
            } else {
                return Err(format!(
                    "{}: module `{child}` has no file ({} or {})",
                    path.display(),
                    flat.display(),
                    nested.display()
                ));
            };
            let mut child_module = module.clone();
            child_module.extend(scope.iter().cloned());
            child_module.push(child);
            queue.push((file, child_module));
        }
        let name = path
            .strip_prefix(workspace)
            .unwrap_or(&path)
            .display()
            .to_string();
        out.push(ModFile { name, module, text });
    }
    out.sort_by(|a, b| a.module.cmp(&b.module));
    Ok(out)
}

/// One knot of files that import each other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Circle {
    /// Every file of the knot (a strongly connected component), in module order.
    pub(crate) files: Vec<String>,
    /// One shortest cycle through its first file, that file repeated at the end
    /// (`a.rs → b.rs → a.rs`), for a reader to follow.
    pub(crate) cycle: Vec<String>,
}

/// Every circle among `files`.
pub(crate) fn circles(files: &[ModFile]) -> Vec<Circle> {
    let scans: Vec<Scan> = files.iter().map(|f| scan(&f.text)).collect();
    // Every module, out-of-line or inline, and the file it lives in.
    let mut modules: BTreeMap<Vec<String>, usize> = BTreeMap::new();
    for (i, f) in files.iter().enumerate() {
        modules.insert(f.module.clone(), i);
        for inline in &scans[i].inline {
            let mut m = f.module.clone();
            m.extend(inline.iter().cloned());
            modules.insert(m, i);
        }
    }
    let mut edges: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); files.len()];
    for (i, f) in files.iter().enumerate() {
        for (scope, path) in &scans[i].paths {
            let mut current = f.module.clone();
            current.extend(scope.iter().cloned());
            let Some(target) = resolve(&current, path, &modules) else {
                continue;
            };
            if target != i && !files[target].module.is_empty() {
                edges[i].insert(target);
            }
        }
    }
    components(&edges)
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|c| Circle {
            cycle: cycle_through(&edges, &c)
                .into_iter()
                .map(|i| files[i].name.clone())
                .collect(),
            files: c.into_iter().map(|i| files[i].name.clone()).collect(),
        })
        .collect()
}

/// The file `path`, named in module `current`, resolves to.
fn resolve(
    current: &[String],
    path: &[String],
    modules: &BTreeMap<Vec<String>, usize>,
) -> Option<usize> {
    let (first, rest) = path.split_first()?;
    let mut full: Vec<String> = match first.as_str() {
        "crate" | "$crate" => Vec::new(),
        "self" => current.to_vec(),
        "super" => current.split_last()?.1.to_vec(),
        // A bare first segment is a path into a child module, or not ours at all.
        child => {
            let mut m = current.to_vec();
            m.push(child.to_owned());
            if !modules.contains_key(&m) {
                return None;
            }
            current.to_vec()
        }
    };
    let mut rest = if matches!(first.as_str(), "crate" | "$crate" | "self" | "super") {
        rest
    } else {
        path
    };
    while let Some(("super", tail)) = rest.split_first().map(|(h, t)| (h.as_str(), t)) {
        full.pop()?;
        rest = tail;
    }
    full.extend(rest.iter().filter(|s| *s != "self").cloned());
    while !full.is_empty() && !modules.contains_key(&full) {
        full.pop();
    }
    modules.get(&full).copied()
}

/// Strongly connected components (Tarjan), each sorted.
fn components(edges: &[BTreeSet<usize>]) -> Vec<Vec<usize>> {
    struct Tarjan<'a> {
        edges: &'a [BTreeSet<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        stack: Vec<usize>,
        on_stack: Vec<bool>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    impl Tarjan<'_> {
        fn visit(&mut self, v: usize) {
            self.index[v] = Some(self.next);
            self.low[v] = self.next;
            self.next += 1;
            self.stack.push(v);
            self.on_stack[v] = true;
            for &w in self.edges[v].iter() {
                match self.index[w] {
                    None => {
                        self.visit(w);
                        self.low[v] = self.low[v].min(self.low[w]);
                    }
                    Some(iw) if self.on_stack[w] => self.low[v] = self.low[v].min(iw),
                    Some(_) => {}
                }
            }
            if Some(self.low[v]) == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack[w] = false;
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                component.sort_unstable();
                self.out.push(component);
            }
        }
    }
    let n = edges.len();
    let mut t = Tarjan {
        edges,
        index: vec![None; n],
        low: vec![0; n],
        stack: Vec::new(),
        on_stack: vec![false; n],
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if t.index[v].is_none() {
            t.visit(v);
        }
    }
    t.out.sort();
    t.out
}

/// One shortest cycle from the component's first file back to it (breadth-first inside the
/// component), so a report names a circle a reader can follow.
fn cycle_through(edges: &[BTreeSet<usize>], component: &[usize]) -> Vec<usize> {
    let Some(&start) = component.first() else {
        return Vec::new();
    };
    let inside: BTreeSet<usize> = component.iter().copied().collect();
    let mut came_from: BTreeMap<usize, usize> = BTreeMap::new();
    let mut frontier = vec![start];
    while !frontier.is_empty() {
        let mut next = Vec::new();
        for v in frontier {
            for &w in edges[v].iter().filter(|w| inside.contains(w)) {
                if w == start {
                    let mut cycle = vec![start, v];
                    let mut at = v;
                    // Every file reached after `start` was recorded with where it came from.
                    while at != start {
                        at = came_from[&at];
                        cycle.push(at);
                    }
                    cycle.reverse();
                    return cycle;
                }
                if let std::collections::btree_map::Entry::Vacant(e) = came_from.entry(w) {
                    e.insert(v);
                    next.push(w);
                }
            }
        }
        frontier = next;
    }
    component.to_vec()
}

/// What one file declares and names.
#[derive(Debug, Default)]
struct Scan {
    /// `mod name;` declarations outside `#[cfg(test)]`: (inline scope, name).
    children: Vec<(Vec<String>, String)>,
    /// Inline modules (`mod name { … }`) outside `#[cfg(test)]`, as paths from the file's
    /// module.
    inline: Vec<Vec<String>>,
    /// Paths that may name a module of the crate: (inline scope, segments).
    paths: Vec<(Vec<String>, Vec<String>)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Ident(String),
    /// `::`
    PathSep,
    Punct(char),
}

fn tokens(text: &str) -> Vec<Tok> {
    let chars: Vec<char> = text.chars().collect();
    let ident_start = |c: char| c.is_alphabetic() || c == '_';
    let ident_char = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = Vec::new();
    let mut i = 0;
    // Skips a character literal whose opening quote is at `i`: one character, or an escape
    // (`'\''`, `'\u{1F600}'`) up to the closing quote.
    let skip_char = |i: usize| {
        let mut i = i + if chars.get(i + 1) == Some(&'\\') {
            3
        } else {
            2
        };
        while i < chars.len() && chars[i] != '\'' {
            i += 1;
        }
        i + 1
    };
    // Skips a quoted string whose opening quote is at `i`; a backslash escapes.
    let skip_string = |mut i: usize| {
        i += 1;
        while i < chars.len() && chars[i] != '"' {
            i += if chars[i] == '\\' { 2 } else { 1 };
        }
        i + 1
    };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c.is_whitespace() {
            i += 1;
        } else if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == '"' {
            i = skip_string(i);
        } else if c == '\'' {
            // A character literal, or a lifetime (skipped like one).
            if next == Some('\\') || chars.get(i + 2) == Some(&'\'') {
                i = skip_char(i);
            } else {
                i += 1;
                while i < chars.len() && ident_char(chars[i]) {
                    i += 1;
                }
            }
        } else if ident_start(c) {
            let start = i;
            while i < chars.len() && ident_char(chars[i]) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let at = chars.get(i).copied();
            match (word.as_str(), at) {
                // Raw strings: r"…", r#"…"#, br…, cr….
                ("r" | "br" | "cr", Some('"' | '#')) if raw_string_at(&chars, i) => {
                    let hashes = chars[i..].iter().take_while(|c| **c == '#').count();
                    i += hashes + 1;
                    loop {
                        if i >= chars.len() {
                            break;
                        }
                        if chars[i] == '"'
                            && chars[i + 1..]
                                .iter()
                                .take(hashes)
                                .filter(|c| **c == '#')
                                .count()
                                == hashes
                        {
                            i += 1 + hashes;
                            break;
                        }
                        i += 1;
                    }
                }
                // Raw identifiers: r#type.
                ("r", Some('#')) => {
                    i += 1;
                }
                ("b" | "c", Some('"')) => i = skip_string(i),
                ("b", Some('\'')) => i = skip_char(i),
                _ => out.push(Tok::Ident(word)),
            }
        } else if c.is_ascii_digit() {
            while i < chars.len() && (ident_char(chars[i]) || chars[i] == '.') {
                i += 1;
            }
        } else if c == ':' && next == Some(':') {
            out.push(Tok::PathSep);
            i += 2;
        } else if c == '$' && next.is_some_and(ident_start) {
            let start = i;
            i += 1;
            while i < chars.len() && ident_char(chars[i]) {
                i += 1;
            }
            out.push(Tok::Ident(chars[start..i].iter().collect()));
        } else {
            out.push(Tok::Punct(c));
            i += 1;
        }
    }
    out
}

/// Whether a raw string starts at `i` (after its `r`): hashes, then a quote.
fn raw_string_at(chars: &[char], i: usize) -> bool {
    chars[i..]
        .iter()
        .find(|c| **c != '#')
        .is_some_and(|c| *c == '"')
}

fn scan(text: &str) -> Scan {
    let toks = tokens(text);
    let mut s = Scan::default();
    // Inline modules open around the current token: (name, brace depth inside it).
    let mut scope: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    let names = |scope: &[(String, usize)]| scope.iter().map(|(n, _)| n.clone()).collect();
    while i < toks.len() {
        match &toks[i] {
            Tok::Punct('#') if is_cfg_test(&toks, i) => {
                i = skip_test_item(&toks, i);
            }
            Tok::Punct('{') => {
                depth += 1;
                i += 1;
            }
            Tok::Punct('}') => {
                if scope.last().is_some_and(|(_, d)| *d == depth) {
                    scope.pop();
                }
                depth = depth.saturating_sub(1);
                i += 1;
            }
            Tok::Ident(w) if w == "mod" => match (toks.get(i + 1), toks.get(i + 2)) {
                (Some(Tok::Ident(name)), Some(Tok::Punct(';'))) => {
                    s.children.push((names(&scope), name.clone()));
                    i += 3;
                }
                (Some(Tok::Ident(name)), Some(Tok::Punct('{'))) => {
                    depth += 1;
                    scope.push((name.clone(), depth));
                    s.inline.push(names(&scope));
                    i += 3;
                }
                _ => i += 1,
            },
            Tok::Ident(w) if w == "use" => {
                let mut paths = Vec::new();
                i = use_tree(&toks, i + 1, &[], &mut paths);
                let at: Vec<String> = names(&scope);
                s.paths.extend(paths.into_iter().map(|p| (at.clone(), p)));
            }
            Tok::Ident(first) if toks.get(i + 1) == Some(&Tok::PathSep) => {
                let after_sep = i > 0 && toks[i - 1] == Tok::PathSep;
                let mut path = vec![first.clone()];
                let mut j = i + 1;
                while toks.get(j) == Some(&Tok::PathSep) {
                    match toks.get(j + 1) {
                        Some(Tok::Ident(seg)) => {
                            path.push(seg.clone());
                            j += 2;
                        }
                        _ => break,
                    }
                }
                if !after_sep {
                    s.paths.push((names(&scope), path));
                }
                i = j;
            }
            _ => i += 1,
        }
    }
    s
}

/// Whether the attribute at `i` is exactly `#[cfg(test)]`.
fn is_cfg_test(toks: &[Tok], i: usize) -> bool {
    let want = [
        Tok::Punct('#'),
        Tok::Punct('['),
        Tok::Ident("cfg".into()),
        Tok::Punct('('),
        Tok::Ident("test".into()),
        Tok::Punct(')'),
        Tok::Punct(']'),
    ];
    toks.get(i..i + want.len()) == Some(&want[..])
}

/// Skips `#[cfg(test)]` and the item under it (further attributes, visibility, then up to a
/// `;` or through a balanced `{ … }`); returns the index after it.
fn skip_test_item(toks: &[Tok], mut i: usize) -> usize {
    let mut brackets = 0usize;
    // The attributes.
    while i < toks.len() {
        match &toks[i] {
            Tok::Punct('#') if brackets == 0 => {}
            Tok::Punct('[') => brackets += 1,
            Tok::Punct(']') => brackets = brackets.saturating_sub(1),
            _ if brackets > 0 => {}
            _ => break,
        }
        i += 1;
    }
    // The item.
    let mut braces = 0usize;
    while i < toks.len() {
        match &toks[i] {
            Tok::Punct(';') if braces == 0 => return i + 1,
            Tok::Punct('{') => braces += 1,
            Tok::Punct('}') => {
                braces = braces.saturating_sub(1);
                if braces == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    i
}

/// Parses a use tree from `i` (after `use`, or inside a group) with `prefix`; pushes every
/// path it names and returns the index after it (after the `;` at the top level).
fn use_tree(toks: &[Tok], mut i: usize, prefix: &[String], out: &mut Vec<Vec<String>>) -> usize {
    // `use ::name` is an external crate.
    let external = prefix.is_empty() && toks.get(i) == Some(&Tok::PathSep);
    let mut path = prefix.to_vec();
    loop {
        match toks.get(i) {
            Some(Tok::PathSep) => i += 1,
            Some(Tok::Ident(w)) if w == "as" => {
                // The alias (a name or `_`) names nothing of ours.
                i += if matches!(toks.get(i + 1), Some(Tok::Ident(_))) {
                    2
                } else {
                    1
                };
            }
            Some(Tok::Ident(seg)) => {
                path.push(seg.clone());
                i += 1;
            }
            Some(Tok::Punct('{')) => {
                i += 1;
                loop {
                    match toks.get(i) {
                        Some(Tok::Punct('}')) => {
                            i += 1;
                            break;
                        }
                        Some(Tok::Punct(',')) => i += 1,
                        None => return i,
                        // A branch that cannot be read ends the group's reading here, rather
                        // than looping on it.
                        Some(_) => match use_tree(toks, i, &path, out) {
                            next if next > i => i = next,
                            _ => return i,
                        },
                    }
                }
                // A group consumed: nothing more of this branch's own path.
                path.clear();
            }
            Some(Tok::Punct('*')) => {
                if !external {
                    out.push(path.clone());
                }
                path.clear();
                i += 1;
            }
            Some(Tok::Punct(';')) if prefix.is_empty() => {
                if !external && !path.is_empty() {
                    out.push(path);
                }
                return i + 1;
            }
            _ => {
                // The end of a branch inside a group (`,` or `}`), or a malformed tree.
                if !external && !path.is_empty() && path.len() > prefix.len() {
                    out.push(path);
                }
                return i;
            }
        }
    }
}

/// The top-level modules of the target whose root file is `root`: its `mod name;`
/// declarations outside `#[cfg(test)]` (inline `mod name { … }` blocks are part of the root).
pub(crate) fn top_level_modules(root: &Path) -> Result<Vec<String>, String> {
    let text = std::fs::read_to_string(root)
        .map_err(|e| format!("cannot read {}: {e}", root.display()))?;
    let mut out: Vec<String> = scan(&text)
        .children
        .into_iter()
        .filter(|(scope, _)| scope.is_empty())
        .map(|(_, name)| name)
        .collect();
    out.sort();
    out.dedup();
    Ok(out)
}

/// One crate as the code map must name it: its directory from the workspace root
/// (`crates/corral-web`), its package name and its targets' top-level modules.
#[derive(Debug, Clone)]
pub(crate) struct MappedCrate {
    /// Its directory, relative to the workspace root.
    pub(crate) dir: String,
    /// Its package name.
    pub(crate) name: String,
    /// The top-level modules of its library and binary targets.
    pub(crate) modules: Vec<String>,
}

/// The code map: the text of `docs/ARCHITECTURE.md` from `## Code map` to the next `## `
/// heading, cut into entries, each a top-level bullet (`- `) and its continuation lines.
fn code_map_entries(architecture: &str) -> Option<Vec<String>> {
    let mut lines = architecture
        .lines()
        .skip_while(|l| l.trim() != "## Code map");
    lines.next()?;
    let mut entries: Vec<String> = Vec::new();
    for line in lines.take_while(|l| !l.starts_with("## ")) {
        if line.starts_with("- ") {
            entries.push(String::new());
        }
        if let Some(entry) = entries.last_mut() {
            entry.push_str(line);
            entry.push('\n');
        }
    }
    Some(entries)
}

/// An entry's subject: its first backticked word (`crates/corral-web`).
fn entry_key(entry: &str) -> Option<&str> {
    let rest = entry.split_once('`')?.1;
    Some(rest.split_once('`')?.0)
}

/// Whether `key` names `dir`: exactly, or as a pattern with one `<…>` placeholder
/// (`crates/corral-provider-<id>`).
fn key_matches(key: &str, dir: &str) -> bool {
    if key == dir {
        return true;
    }
    let Some((prefix, rest)) = key.split_once('<') else {
        return false;
    };
    let Some((_, suffix)) = rest.split_once('>') else {
        return false;
    };
    dir.len() > prefix.len() + suffix.len() && dir.starts_with(prefix) && dir.ends_with(suffix)
}

/// Whether `word` occurs in `text` not as part of a longer identifier or path segment.
fn mentions(text: &str, word: &str) -> bool {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    text.match_indices(word).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        !before.is_some_and(ident) && !after.is_some_and(ident)
    })
}

/// What the code map in `architecture` fails to name: each crate must be named (its
/// directory or its package name, anywhere in the map), and each of its top-level modules
/// in the crate's own entry or in a pattern entry that matches it, as `name.rs`, `name/`
/// or `` `name` ``.
pub(crate) fn code_map_gaps(architecture: &str, crates: &[MappedCrate]) -> Vec<String> {
    let Some(entries) = code_map_entries(architecture) else {
        return vec!["docs/ARCHITECTURE.md has no `## Code map` section".to_owned()];
    };
    let map = entries.concat();
    let mut gaps = Vec::new();
    for c in crates {
        if !mentions(&map, &c.dir) && !mentions(&map, &c.name) {
            gaps.push(format!(
                "the code map in docs/ARCHITECTURE.md does not name crate {} ({})",
                c.name, c.dir
            ));
            continue;
        }
        let own: String = entries
            .iter()
            .filter(|e| entry_key(e).is_some_and(|k| key_matches(k, &c.dir)))
            .map(String::as_str)
            .collect();
        for m in &c.modules {
            let named = mentions(&own, &format!("{m}.rs"))
                || own.contains(&format!("{m}/"))
                || own.contains(&format!("`{m}`"));
            if !named {
                gaps.push(format!(
                    "the code map in docs/ARCHITECTURE.md does not name module `{m}` of {} (in the entry of `{}`)",
                    c.name, c.dir
                ));
            }
        }
    }
    gaps
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cycles(files: &[ModFile]) -> Vec<Vec<String>> {
        circles(files).into_iter().map(|c| c.cycle).collect()
    }

    fn files(sources: &[(&str, &str)]) -> Vec<ModFile> {
        sources
            .iter()
            .map(|(module, text)| ModFile {
                name: if module.is_empty() {
                    "lib.rs".to_owned()
                } else {
                    format!("{}.rs", module.replace("::", "/"))
                },
                module: module
                    .split("::")
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect(),
                text: (*text).to_owned(),
            })
            .collect()
    }

    #[test]
    fn a_circle_between_two_files_is_reported_with_its_path() {
        let f = files(&[
            ("", "mod a; mod b;"),
            ("a", "use crate::b::Helper;\npub fn f() {}"),
            ("b", "pub struct Helper;\nfn g() { crate::a::f() }"),
        ]);
        assert_eq!(cycles(&f), [["a.rs", "b.rs", "a.rs"]]);
    }

    #[test]
    fn a_knot_lists_every_file_beside_one_cycle() {
        let f = files(&[
            ("", "mod a; mod b; mod c;"),
            ("a", "use crate::b::B;"),
            ("b", "use crate::c::C; use crate::a::A;"),
            ("c", "use crate::a::A;"),
        ]);
        assert_eq!(
            circles(&f),
            [Circle {
                files: vec!["a.rs".into(), "b.rs".into(), "c.rs".into()],
                cycle: vec!["a.rs".into(), "b.rs".into(), "a.rs".into()],
            }]
        );
    }

    #[test]
    fn a_parent_that_both_registers_its_children_and_helps_them_is_a_circle() {
        // The shape of the old `console/mod.rs`: the router names `handlers::home`, the
        // handlers take `super::html` back.
        let f = files(&[
            ("", "mod console;"),
            (
                "console",
                "mod handlers;\npub fn configure() { use handlers as h; h::home(); }\npub(crate) fn html() {}",
            ),
            (
                "console::handlers",
                "use super::html;\npub fn home() { html() }",
            ),
        ]);
        assert_eq!(
            cycles(&f),
            [["console.rs", "console/handlers.rs", "console.rs"]]
        );
        // With the helpers in a sibling, the same tree has no circle.
        let f = files(&[
            ("", "mod console;"),
            (
                "console",
                "mod handlers; mod respond;\npub fn configure() { handlers::home(); }",
            ),
            ("console::respond", "pub(crate) fn html() {}"),
            (
                "console::handlers",
                "use super::respond::html;\npub fn home() { html() }",
            ),
        ]);
        assert!(circles(&f).is_empty());
    }

    #[test]
    fn grouped_and_glob_uses_and_macros_count() {
        let f = files(&[
            ("", "mod a; mod b; mod c; mod d;"),
            ("a", "use crate::{b::{self, X}, d};"),
            ("b", "macro_rules! m { () => { $crate::c::f() } }"),
            ("c", "use super::a::*;"),
            ("d", "pub struct D;"),
        ]);
        assert_eq!(cycles(&f), [["a.rs", "b.rs", "c.rs", "a.rs"]]);
    }

    #[test]
    fn comments_strings_tests_and_the_crate_root_do_not_count() {
        let f = files(&[
            ("", "mod a; mod b;\npub use a::A;\npub struct Root;"),
            (
                "a",
                "//! See [`crate::b::B`].\npub struct A;\nconst S: &str = \"crate::b::B\";\nconst R: &str = r#\"crate::b::B\"#;\nconst C: char = '\"';\nfn f<'a>(x: &'a str) {}\n/* crate::b::B */\n#[cfg(test)]\nmod tests { use crate::b::B; }\n#[cfg(test)]\nuse crate::b::B;",
            ),
            ("b", "use crate::a::A;\nuse crate::Root;\npub struct B;"),
        ]);
        assert!(circles(&f).is_empty(), "{:?}", circles(&f));
    }

    #[test]
    fn underscore_aliases_and_escaped_characters_do_not_stop_the_reading() {
        let f = files(&[
            ("", "mod a; mod b; mod c;"),
            (
                "a",
                "use crate::b::{Tr as _, X};\nconst Q: char = '\\'';\nconst B: u8 = b'\\'';\nconst U: char = '\\u{7f}';\nfn f() { crate::c::g() }",
            ),
            ("b", "pub trait Tr {}\npub struct X;"),
            ("c", "use crate::a::f;\npub fn g() {}"),
        ]);
        assert_eq!(cycles(&f), [["a.rs", "c.rs", "a.rs"]]);
    }

    #[test]
    fn super_inside_an_inline_module_names_its_own_file() {
        let f = files(&[
            ("", "mod pages; mod view;"),
            (
                "pages",
                "pub const BASE: &str = \"/\";\npub mod paths { use super::BASE; }\nuse crate::view::Flash;",
            ),
            (
                "view",
                "pub struct Flash;\nfn f() { let _ = crate::pages::paths::X; }",
            ),
        ]);
        // `view` → `pages` and `pages` → `view` are real; `super::BASE` inside `paths` is not
        // an edge out of `pages`.
        assert_eq!(cycles(&f), [["pages.rs", "view.rs", "pages.rs"]]);
        let f = files(&[
            ("", "mod pages; mod view;"),
            (
                "pages",
                "pub const BASE: &str = \"/\";\npub mod paths { use super::BASE; }",
            ),
            ("view", "fn f() { let _ = crate::pages::paths::X; }"),
        ]);
        assert!(circles(&f).is_empty());
    }

    #[test]
    fn the_module_tree_is_followed_on_disk_leaving_test_modules_out() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::create_dir_all(src.join("a")).unwrap();
        std::fs::write(
            src.join("lib.rs"),
            "mod a;\n#[cfg(test)]\nmod tests;\nmod b;",
        )
        .unwrap();
        std::fs::write(src.join("a.rs"), "mod inner;\nuse crate::b::B;").unwrap();
        std::fs::write(src.join("a/inner.rs"), "pub struct I;").unwrap();
        std::fs::create_dir_all(src.join("b")).unwrap();
        std::fs::write(
            src.join("b/mod.rs"),
            "pub struct B;\nuse crate::a::inner::I;",
        )
        .unwrap();
        let tree = load_tree(&src.join("lib.rs"), dir.path()).unwrap();
        let names: Vec<&str> = tree.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(
            names,
            ["src/lib.rs", "src/a.rs", "src/a/inner.rs", "src/b/mod.rs"]
        );
        assert!(circles(&tree).is_empty());
        std::fs::write(src.join("a/inner.rs"), "use crate::b::B;").unwrap();
        let tree = load_tree(&src.join("lib.rs"), dir.path()).unwrap();
        assert_eq!(
            cycles(&tree),
            [["src/a/inner.rs", "src/b/mod.rs", "src/a/inner.rs"]]
        );
        std::fs::write(src.join("lib.rs"), "mod gone;").unwrap();
        assert!(load_tree(&src.join("lib.rs"), dir.path()).is_err());
    }

    fn mapped(dir: &str, name: &str, modules: &[&str]) -> MappedCrate {
        MappedCrate {
            dir: dir.to_owned(),
            name: name.to_owned(),
            modules: modules.iter().map(|m| (*m).to_owned()).collect(),
        }
    }

    const MAP: &str = "# Architecture\n\n## Code map\n\n\
        - `crates/corral-web` — the edge: `app.rs` builds it, `control/` holds the\n  \
          control plane, and `listen` the listener.\n\
        - `crates/corral-provider-<id>` — the adapters (`corral-provider-morph`, …): `api.rs`,\n  \
          `client.rs`.\n\
        - `xtask` — the tasks.\n\n## Entry points\n\n- `crates/corral-mcp` — outside the map: `tools.rs`.\n";

    #[test]
    fn a_code_map_naming_every_crate_and_module_has_no_gaps() {
        let crates = [
            mapped(
                "crates/corral-web",
                "corral-web",
                &["app", "control", "listen"],
            ),
            mapped(
                "crates/corral-provider-morph",
                "corral-provider-morph",
                &["api", "client"],
            ),
            mapped("xtask", "xtask", &[]),
        ];
        assert_eq!(code_map_gaps(MAP, &crates), Vec::<String>::new());
    }

    #[test]
    fn a_crate_or_module_missing_from_the_code_map_is_a_gap() {
        let crates = [
            // `reply` is named nowhere; `apps` is not `app.rs`.
            mapped("crates/corral-web", "corral-web", &["app", "reply", "apps"]),
            // An adapter module the pattern entry does not name.
            mapped(
                "crates/corral-provider-morph",
                "corral-provider-morph",
                &["api", "tarball"],
            ),
            // Named only below the code map, under another heading.
            mapped("crates/corral-mcp", "corral-mcp", &["tools"]),
        ];
        let gaps = code_map_gaps(MAP, &crates);
        assert_eq!(gaps.len(), 4, "{gaps:#?}");
        assert!(
            gaps[0].contains("module `reply` of corral-web"),
            "{gaps:#?}"
        );
        assert!(gaps[1].contains("module `apps` of corral-web"), "{gaps:#?}");
        assert!(
            gaps[2].contains("module `tarball` of corral-provider-morph"),
            "{gaps:#?}"
        );
        assert!(
            gaps[3].contains("does not name crate corral-mcp"),
            "{gaps:#?}"
        );
        assert_eq!(
            code_map_gaps("# Architecture\n", &crates),
            ["docs/ARCHITECTURE.md has no `## Code map` section"]
        );
    }

    #[test]
    fn top_level_modules_are_the_roots_mod_declarations_outside_tests() {
        let dir = std::env::temp_dir().join(format!("xtask-codemap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let root = dir.join("lib.rs");
        std::fs::write(
            &root,
            "mod b;\npub mod a;\nmod inline { mod nested; }\n#[cfg(test)]\nmod tests;\n",
        )
        .expect("write");
        let got = top_level_modules(&root).expect("reads");
        std::fs::remove_dir_all(&dir).expect("clean up");
        assert_eq!(got, ["a", "b"]);
    }
}
