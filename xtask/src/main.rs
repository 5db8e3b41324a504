//! Project automation, in Rust so it runs wherever cargo does.
//!
//! - `cargo xtask ci`: the dependency rules, `cargo fmt --check`, Redocly's lint of
//!   `docs/openapi.json`, clippy with `-D warnings`, the
//!   whole test suite (nextest), the pure crates' doc examples, then `schemathesis`. This is
//!   the README's test command; `.ci/run` calls it after setting up PostgreSQL and Python.
//!   Between the tests and Schemathesis, `mcp`; before the tests, `e2b-venv` and `e2b-js`.
//!   Before and after it all, the disks of `local` sandboxes that tests left mounted after
//!   their data was deleted are unmounted (`strays.rs`; alone: `cargo xtask strays`).
//! - `cargo xtask e2b-venv`, `cargo xtask e2b-js`: the published E2B Python SDK in
//!   `target/e2b-venv` and JavaScript SDK in `target/e2b-js`, which the E2B front door's
//!   journey tests run (see `e2b.rs`).
//! - `cargo xtask deps`: only the dependency rules of DESIGN.md §2, module import circles
//!   inside a crate included (see `modcycles.rs`).
//! - `cargo xtask bench`: what Corral adds to the providers it fronts, seven scenarios each
//!   against a baseline of the same run, written to `target/bench/*.json` and
//!   `docs/benchmarks.md` (see `bench/mod.rs` for the scenarios and options).
//! - `cargo xtask schemathesis`: a generated Python client and Schemathesis against a live
//!   `corral serve` on loopback (see `schemathesis.rs`).
//! - `cargo xtask mcp`: the MCP server driven by the official MCP Python SDK over stdio and
//!   streamable HTTP against a live `corral serve` (see `mcp.rs`).
//! - `cargo xtask fuzz [--seconds N] [--target T]`: the parsers' fuzz targets under the
//!   `corral-fuzz` mutation driver, in release mode (see `fuzz.rs` and `fuzz/README.md`).
//! - `cargo xtask load [OPS] [CLIENTS]`: the load test with invariants
//!   (`bins/corral/tests/it/load.rs`) at a size beyond CI's, by default 50 000 operations
//!   from 16 clients, without nextest's time limit.
//! - `cargo xtask openapi`: regenerates `docs/openapi.json` from the server's code (a test in
//!   `bins/corral` fails while the committed file and the served document differ).
//! - `cargo xtask openapi-lint`: `docs/openapi.json` against Redocly's recommended ruleset
//!   (npm `@redocly/cli`, pinned, under `target/redocly`); any error or warning fails.
#![allow(clippy::print_stdout)] // A command-line tool reports on stdout.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use serde_json::Value;

mod bench;
mod e2b;
mod fuzz;
mod mcp;
mod modcycles;
mod postgres;
mod schemathesis;
mod strays;

fn main() -> ExitCode {
    // The `local` bench's sandboxes use this executable as their init.
    corral_provider_local::run_init_if_requested();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("deps") => deps(),
        Some("bench") => bench::bench(&args[1..]),
        Some("fuzz") => fuzz::fuzz(&args[1..]),
        Some("mcp") => mcp::mcp(),
        Some("e2b-venv") => e2b::venv().map(|_| ()),
        Some("e2b-js") => e2b::js().map(|_| ()),
        Some("strays") => {
            strays::unmount();
            Ok(())
        }
        Some("openapi") => openapi(),
        Some("openapi-lint") => openapi_lint(),
        Some("schemathesis") => schemathesis::schemathesis(&args[1..]),
        Some("load") => load(&args[1..]),
        _ => {
            eprintln!(
                "usage: cargo xtask <ci|deps|bench|e2b-venv|e2b-js|fuzz|load|mcp|openapi|openapi-lint|schemathesis|strays>"
            );
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `cargo xtask load [OPS] [CLIENTS]`: the load test at a larger size.
fn load(args: &[String]) -> Result<(), String> {
    let ops = args.first().map_or("50000", String::as_str);
    let clients = args.get(1).map_or("16", String::as_str);
    run_env(
        "cargo",
        &[
            "test",
            "-p",
            "corral",
            "--test",
            "it",
            "--",
            "load::",
            "--nocapture",
        ],
        &[
            ("CORRAL_LOAD_OPS", ops.to_owned()),
            ("CORRAL_LOAD_CLIENTS", clients.to_owned()),
        ],
    )
}

pub(crate) fn run(program: &str, args: &[&str]) -> Result<(), String> {
    run_env(program, args, &[])
}

/// [`run`] with extra environment variables for the child.
pub(crate) fn run_env(program: &str, args: &[&str], env: &[(&str, String)]) -> Result<(), String> {
    println!("$ {program} {}", args.join(" "));
    let status = Command::new(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .status()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`{program} {}` failed ({status})", args.join(" ")))
    }
}

/// `target/<dir>`, an npm prefix with `package` installed at `version` once (its
/// `package.json` says which version is there); the prefix.
pub(crate) fn pinned_npm(dir: &str, package: &str, version: &str) -> Result<PathBuf, String> {
    let prefix = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target")
        .join(dir);
    let installed = std::fs::read_to_string(
        prefix
            .join("node_modules")
            .join(package)
            .join("package.json"),
    )
    .ok()
    .and_then(|p| serde_json::from_str::<Value>(&p).ok())
    .is_some_and(|p| p["version"] == version);
    if !installed {
        std::fs::create_dir_all(&prefix)
            .map_err(|e| format!("cannot create {}: {e}", prefix.display()))?;
        run(
            "npm",
            &[
                "install",
                "--no-audit",
                "--no-fund",
                "--prefix",
                prefix.to_str().ok_or("non-UTF-8 path")?,
                &format!("{package}@{version}"),
            ],
        )?;
    }
    Ok(prefix)
}

pub(crate) fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned())
}

fn ci() -> Result<(), String> {
    // Before and after, whatever the outcome: `local` sandboxes tests left mounted would
    // otherwise fill the disk run by run (see `strays.rs`).
    strays::unmount();
    let result = ci_steps();
    strays::unmount();
    result
}

fn ci_steps() -> Result<(), String> {
    let cargo = cargo();
    deps()?;
    run(&cargo, &["fmt", "--all", "--", "--check"])?;
    openapi_lint()?;
    run(
        &cargo,
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
    )?;
    // PostgreSQL tests are named `…postgres…`. With a server they run (and must: a missing
    // one fails instead of returning early); without one they are filtered out, so nextest's
    // summary counts them as skipped, never as passed.
    // The published E2B SDKs, which the E2B front door's journey tests drive.
    e2b::venv()?;
    e2b::js()?;
    let mut nextest = vec!["nextest", "run", "--workspace", "--profile", "ci"];
    let mut env = vec![(postgres::REQUIRE_ENV, "1".to_owned())];
    match postgres::find_or_start() {
        Ok(url) => {
            println!("xtask: PostgreSQL tests run against {url}");
            env.push((postgres::URL_ENV, url));
        }
        Err(why) => {
            println!(
                "xtask: PostgreSQL is not available ({why}); the PostgreSQL tests are reported as skipped"
            );
            nextest.extend(["-E", "not test(/postgres/)"]);
        }
    }
    run_env(&cargo, &nextest, &env)?;
    run(
        &cargo,
        &[
            "test",
            "--doc",
            "-p",
            "corral-domain",
            "-p",
            "corral-errors",
        ],
    )?;
    // The MCP server driven by the official Python SDK, over stdio and streamable HTTP.
    mcp::mcp()?;
    // The API tried by tools written elsewhere, against a live server.
    schemathesis::schemathesis(&[])
}

fn openapi() -> Result<(), String> {
    let out = Command::new(cargo())
        .args(["run", "--quiet", "-p", "corral", "--", "openapi"])
        .output()
        .map_err(|e| format!("cannot run the server's openapi command: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "`corral openapi` failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    // The workspace root is the parent of this crate, wherever cargo was started.
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/openapi.json");
    std::fs::write(&path, &out.stdout)
        .map_err(|e| format!("cannot write docs/openapi.json: {e}"))?;
    println!("wrote docs/openapi.json ({} bytes)", out.stdout.len());
    Ok(())
}

/// Redocly's CLI (npm `@redocly/cli`), pinned: the version whose `recommended` ruleset
/// `docs/openapi.json` passes.
const REDOCLY_CLI_VERSION: &str = "2.77.0";

/// `docs/openapi.json` against Redocly's recommended ruleset (npm `@redocly/cli`, installed
/// under `target/redocly` when missing): any error or warning fails.
fn openapi_lint() -> Result<(), String> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let prefix = pinned_npm("redocly", "@redocly/cli", REDOCLY_CLI_VERSION)?;
    let bin = prefix.join("node_modules/.bin/redocly");
    let doc = root.join("docs/openapi.json");
    let doc = doc.to_str().ok_or("non-UTF-8 path")?;
    let env = [
        ("REDOCLY_TELEMETRY", "off".to_owned()),
        ("REDOCLY_SUPPRESS_UPDATE_NOTICE", "true".to_owned()),
    ];
    let lint = ["lint", doc, "--extends=recommended", "--max-problems=50"];
    run_env(bin.to_str().ok_or("non-UTF-8 path")?, &lint, &env)?;
    // `lint` exits non-zero on errors only; a warning fails CI too, so read its summary.
    let out = Command::new(&bin)
        .args(["lint", doc, "--extends=recommended", "--format=summary"])
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .map_err(|e| format!("cannot run redocly: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Summary lines are `warning <rule>: <count>` and `error <rule>: <count>` (a banner about
    // Node.js versions may say "warning" elsewhere).
    let problems = text
        .lines()
        .any(|l| l.starts_with("warning ") || l.starts_with("error "));
    if !out.status.success() || problems {
        return Err(format!("redocly lint reports problems:\n{text}"));
    }
    Ok(())
}

/// Crates that must stay pure: no async runtime, HTTP, database or web framework, even
/// transitively.
const PURE: &[&str] = &["corral-domain", "corral-errors"];
const IMPURE_DEPS: &[&str] = &[
    "tokio",
    "reqwest",
    "hyper",
    "diesel",
    "diesel-async",
    "actix-web",
];

/// Infrastructure no provider crate may reach, even transitively.
const STORAGE_AND_WEB: &[&str] = &["diesel", "diesel-async", "actix-web", "actix-http"];

/// Direct dependencies that only the named crates may have.
const ONLY: &[(&str, &[&str])] = &[
    (
        "diesel",
        &[
            "corral-registry",
            "corral-idempotency",
            "corral-control-store",
        ],
    ),
    (
        "diesel-async",
        &[
            "corral-registry",
            "corral-idempotency",
            "corral-control-store",
        ],
    ),
    (
        "diesel_migrations",
        &[
            "corral-registry",
            "corral-idempotency",
            "corral-control-store",
        ],
    ),
    ("actix-web", WEB),
    ("actix-http", WEB),
    ("actix-server", WEB),
    ("actix-service", WEB),
    ("maud", &[CONSOLE]),
];

/// The web layer: the HTTP edge, the console and the binary that composes them.
const WEB: &[&str] = &["corral", "corral-web", CONSOLE];
/// The console: the only crate with HTML templates.
const CONSOLE: &str = "corral-console";
/// The HTTP edge, which the binary mounts the console into and which never names it.
const EDGE: &str = "corral-web";
/// Storage: what the console must not depend on directly, besides the crates that do (it
/// reaches storage only through the use-case crates).
const STORAGE: &[&str] = &["diesel", "diesel-async"];

fn deps() -> Result<(), String> {
    let out = Command::new(cargo())
        .args(["metadata", "--format-version", "1", "--locked"])
        .output()
        .map_err(|e| format!("cannot run cargo metadata: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let meta: Value = serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
    let mut violations = check_rules(&meta)?;
    violations.extend(module_circles(&meta)?);
    violations.extend(code_map_gaps(&meta)?);
    if violations.is_empty() {
        println!("dependency rules hold");
        Ok(())
    } else {
        for v in &violations {
            eprintln!("dependency rule broken: {v}");
        }
        Err(format!("{} dependency rule(s) broken", violations.len()))
    }
}

/// Package name by id, and each package's normal (non-dev, non-build) dependencies by id.
struct Graph {
    names: BTreeMap<String, String>,
    normal: BTreeMap<String, Vec<String>>,
}

fn graph(meta: &Value) -> Result<Graph, String> {
    let names = meta["packages"]
        .as_array()
        .ok_or("metadata has no packages")?
        .iter()
        .filter_map(|p| Some((p["id"].as_str()?.to_owned(), p["name"].as_str()?.to_owned())))
        .collect();
    let mut normal = BTreeMap::new();
    for node in meta["resolve"]["nodes"]
        .as_array()
        .ok_or("metadata has no resolve graph")?
    {
        let id = node["id"].as_str().ok_or("node without id")?.to_owned();
        let deps = node["deps"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|d| {
                d["dep_kinds"]
                    .as_array()
                    .is_some_and(|kinds| kinds.iter().any(|k| k["kind"].is_null()))
            })
            .filter_map(|d| d["pkg"].as_str().map(str::to_owned))
            .collect();
        normal.insert(id, deps);
    }
    Ok(Graph { names, normal })
}

impl Graph {
    fn name<'a>(&'a self, id: &'a str) -> &'a str {
        self.names.get(id).map_or(id, String::as_str)
    }

    /// Whether package `id` depends directly on a storage crate ([`STORAGE`]).
    fn is_storage(&self, id: &str) -> bool {
        self.normal
            .get(id)
            .into_iter()
            .flatten()
            .any(|d| STORAGE.contains(&self.name(d)))
    }

    fn transitive(&self, root: &str) -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![root.to_owned()];
        while let Some(id) = stack.pop() {
            for dep in self.normal.get(&id).into_iter().flatten() {
                if seen.insert(dep.clone()) {
                    stack.push(dep.clone());
                }
            }
        }
        seen
    }
}

fn check_rules(meta: &Value) -> Result<Vec<String>, String> {
    let g = graph(meta)?;
    let members: Vec<String> = meta["workspace_members"]
        .as_array()
        .ok_or("metadata has no workspace members")?
        .iter()
        .filter_map(|m| m.as_str().map(str::to_owned))
        .collect();
    let mut violations = Vec::new();
    for member in &members {
        let name = g.name(member).to_owned();
        let reach: BTreeSet<String> = g
            .transitive(member)
            .iter()
            .map(|id| g.name(id).to_owned())
            .collect();
        if PURE.contains(&name.as_str()) {
            for bad in IMPURE_DEPS.iter().filter(|b| reach.contains(**b)) {
                violations.push(format!("{name} is pure but depends on {bad}"));
            }
        }
        if name.starts_with("corral-provider") {
            for bad in STORAGE_AND_WEB.iter().filter(|b| reach.contains(**b)) {
                violations.push(format!("{name} is a provider crate but depends on {bad}"));
            }
        }
        if name == EDGE {
            for bad in [CONSOLE, "maud"].iter().filter(|b| reach.contains(**b)) {
                violations.push(format!(
                    "{name} is the HTTP edge but depends on {bad} (the binary mounts the console)"
                ));
            }
        }
        if name == CONSOLE {
            for dep in g.normal.get(member).into_iter().flatten() {
                let dep_name = g.name(dep);
                if STORAGE.contains(&dep_name) || g.is_storage(dep) {
                    violations.push(format!(
                        "{name} depends directly on {dep_name}, a storage crate (the console reaches storage only through the use-case crates)"
                    ));
                }
            }
        }
        for dep in g.normal.get(member).into_iter().flatten() {
            let dep_name = g.name(dep);
            if let Some((_, allowed)) = ONLY.iter().find(|(d, _)| *d == dep_name)
                && !allowed.contains(&name.as_str())
            {
                violations.push(format!(
                    "{name} depends directly on {dep_name}, which only {allowed:?} may"
                ));
            }
        }
    }
    Ok(violations)
}

/// Crates and top-level modules the code map of `docs/ARCHITECTURE.md` does not name (see
/// `modcycles::code_map_gaps`).
fn code_map_gaps(meta: &Value) -> Result<Vec<String>, String> {
    let root = meta["workspace_root"]
        .as_str()
        .ok_or("metadata has no workspace root")?;
    let members: BTreeSet<&str> = meta["workspace_members"]
        .as_array()
        .ok_or("metadata has no workspace members")?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let mut crates = Vec::new();
    for package in meta["packages"]
        .as_array()
        .ok_or("metadata has no packages")?
    {
        if !package["id"]
            .as_str()
            .is_some_and(|id| members.contains(id))
        {
            continue;
        }
        let manifest = std::path::Path::new(package["manifest_path"].as_str().unwrap_or(""));
        let dir = manifest
            .parent()
            .and_then(|d| d.strip_prefix(root).ok())
            .map(|d| d.display().to_string())
            .ok_or("a package outside the workspace root")?;
        let mut modules = BTreeSet::new();
        for target in package["targets"].as_array().into_iter().flatten() {
            let is_code = target["kind"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| matches!(k.as_str(), Some("lib" | "bin"))));
            if let Some(src) = target["src_path"].as_str().filter(|_| is_code) {
                modules.extend(modcycles::top_level_modules(std::path::Path::new(src))?);
            }
        }
        crates.push(modcycles::MappedCrate {
            dir,
            name: package["name"].as_str().unwrap_or("?").to_owned(),
            modules: modules.into_iter().collect(),
        });
    }
    let doc = std::path::Path::new(root).join("docs/ARCHITECTURE.md");
    let text =
        std::fs::read_to_string(&doc).map_err(|e| format!("cannot read {}: {e}", doc.display()))?;
    Ok(modcycles::code_map_gaps(&text, &crates))
}

/// Module import circles inside each library and binary target of the workspace (see
/// `modcycles.rs`): one violation per circle.
fn module_circles(meta: &Value) -> Result<Vec<String>, String> {
    let root = meta["workspace_root"]
        .as_str()
        .ok_or("metadata has no workspace root")?;
    let members: BTreeSet<&str> = meta["workspace_members"]
        .as_array()
        .ok_or("metadata has no workspace members")?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let code = [
        "lib",
        "rlib",
        "dylib",
        "cdylib",
        "staticlib",
        "proc-macro",
        "bin",
    ];
    let mut violations = Vec::new();
    for package in meta["packages"]
        .as_array()
        .ok_or("metadata has no packages")?
    {
        if !package["id"]
            .as_str()
            .is_some_and(|id| members.contains(id))
        {
            continue;
        }
        let name = package["name"].as_str().unwrap_or("?");
        for target in package["targets"].as_array().into_iter().flatten() {
            let is_code = target["kind"].as_array().is_some_and(|kinds| {
                kinds
                    .iter()
                    .any(|k| k.as_str().is_some_and(|k| code.contains(&k)))
            });
            let Some(src) = target["src_path"].as_str().filter(|_| is_code) else {
                continue;
            };
            let tree = modcycles::load_tree(std::path::Path::new(src), std::path::Path::new(root))?;
            for circle in modcycles::circles(&tree) {
                violations.push(format!(
                    "module import circle in {name}, {} files ({}): {}",
                    circle.files.len(),
                    circle.files.join(", "),
                    circle.cycle.join(" → ")
                ));
            }
        }
    }
    Ok(violations)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn meta(edges: &[(&str, &str)], members: &[&str]) -> Value {
        let mut names: BTreeSet<&str> = members.iter().copied().collect();
        for (a, b) in edges {
            names.insert(a);
            names.insert(b);
        }
        let packages: Vec<Value> = names.iter().map(|n| json!({"id": n, "name": n})).collect();
        let nodes: Vec<Value> = names
            .iter()
            .map(|n| {
                let deps: Vec<Value> = edges
                    .iter()
                    .filter(|(a, _)| a == n)
                    .map(|(_, b)| json!({"pkg": b, "dep_kinds": [{"kind": null}]}))
                    .collect();
                json!({"id": n, "deps": deps})
            })
            .collect();
        json!({"packages": packages, "workspace_members": members, "resolve": {"nodes": nodes}})
    }

    #[test]
    fn a_pure_crate_reaching_tokio_transitively_is_reported() {
        let m = meta(
            &[("corral-domain", "helper"), ("helper", "tokio")],
            &["corral-domain"],
        );
        let v = check_rules(&m).unwrap();
        assert_eq!(v, ["corral-domain is pure but depends on tokio"]);
    }

    #[test]
    fn diesel_outside_the_registry_and_actix_outside_the_bin_are_reported() {
        let m = meta(
            &[
                ("corral-service", "diesel"),
                ("corral-registry", "diesel"),
                ("corral", "actix-web"),
                ("corral-provider-e2b", "actix-web"),
            ],
            &[
                "corral-service",
                "corral-registry",
                "corral",
                "corral-provider-e2b",
            ],
        );
        let v = check_rules(&m).unwrap();
        assert_eq!(v.len(), 3, "{v:?}");
        assert!(
            v.iter()
                .any(|s| s.starts_with("corral-service depends directly on diesel"))
        );
        assert!(
            v.iter()
                .any(|s| s.starts_with("corral-provider-e2b is a provider crate"))
        );
        assert!(
            v.iter()
                .any(|s| s.starts_with("corral-provider-e2b depends directly on actix-web"))
        );
    }

    #[test]
    fn actix_outside_the_web_layer_and_maud_outside_the_console_are_reported() {
        let m = meta(
            &[
                ("corral", "actix-web"),
                ("corral-web", "actix-web"),
                ("corral-web", "actix-server"),
                ("corral-console", "actix-web"),
                ("corral-console", "maud"),
                ("corral-service", "actix-http"),
                ("corral-control", "maud"),
            ],
            &[
                "corral",
                "corral-web",
                "corral-console",
                "corral-service",
                "corral-control",
            ],
        );
        let v = check_rules(&m).unwrap();
        assert_eq!(
            v,
            [
                "corral-service depends directly on actix-http, which only [\"corral\", \"corral-web\", \"corral-console\"] may",
                "corral-control depends directly on maud, which only [\"corral-console\"] may",
            ]
        );
    }

    #[test]
    fn the_http_edge_reaching_the_console_or_maud_is_reported() {
        let m = meta(
            &[
                ("corral-web", "helper"),
                ("helper", "corral-console"),
                ("corral-console", "maud"),
            ],
            &["corral-web", "corral-console"],
        );
        let v = check_rules(&m).unwrap();
        assert_eq!(
            v,
            [
                "corral-web is the HTTP edge but depends on corral-console (the binary mounts the console)",
                "corral-web is the HTTP edge but depends on maud (the binary mounts the console)",
            ]
        );
    }

    #[test]
    fn the_console_depending_on_a_storage_crate_is_reported() {
        let m = meta(
            &[
                ("corral-console", "corral-control"),
                ("corral-console", "corral-registry"),
                ("corral-control", "corral-registry"),
                ("corral-registry", "diesel"),
            ],
            &["corral-console", "corral-control", "corral-registry"],
        );
        let v = check_rules(&m).unwrap();
        // Through the use cases (corral-control) is fine; directly is not.
        assert_eq!(
            v,
            [
                "corral-console depends directly on corral-registry, a storage crate (the console reaches storage only through the use-case crates)"
            ]
        );
    }

    #[test]
    fn dev_dependencies_do_not_count() {
        let mut m = meta(&[("corral-domain", "tokio")], &["corral-domain"]);
        m["resolve"]["nodes"][0]["deps"][0]["dep_kinds"] = json!([{"kind": "dev"}]);
        assert!(check_rules(&m).unwrap().is_empty());
    }
}
