//! The workspace's structural rules. Each rule is a table entry that is easy
//! to extend; each has a test below proving that it can fail, fed a made-up
//! manifest or file that breaks it.
//!
//! - **Dependencies** ([`DEPENDENCY_RULES`]): what a crate's normal
//!   dependencies (`[dependencies]`, target-specific ones included, optional
//!   ones too; not dev- or build-dependencies) may not name. A rule for a
//!   crate the workspace lacks is itself an error, so a renamed crate cannot
//!   silently drop its rule.
//! - **Lints**: every crate takes the workspace's lints (`[lints] workspace
//!   = true`).
//! - **SQL** ([`SQL_PATTERNS`], [`SQL_ALLOWED_IN`]): no `.rs` file outside
//!   the crates allowed to hold SQL contains SQL, comments aside.
//! - **Module circles** ([`ACYCLIC_MODULES`]): in these crates no two
//!   top-level modules name each other (`crate::a` in b and `crate::b` in
//!   a), so each reads without the other.
//! - **Owned tasks** ([`ACYCLIC_MODULES`] too): those crates never call
//!   `tokio::spawn` (a task nobody owns or aborts): their tasks go into a
//!   `JoinSet` their owner stops, and timers are polled with their work.
//! - **HTTP statuses** ([`STATUS_FILES`]): a server's `src/` names a
//!   status (`StatusCode::`) only in its error table and its answers
//!   module, so one failure gets one status wherever it is met.
//! - **Servers with deadlines**: no crate's `src/` calls `axum::serve`,
//!   which sets no deadline for a request head and no cap on connections;
//!   every server goes through `hangar_http::serve`.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// Crates that do I/O or run async code, and the crates of this workspace
/// built on them: none of them belongs below the pure domain.
const IO_CRATES: &[&str] = &[
    "tokio",
    "tokio-util",
    "tokio-stream",
    "futures",
    "futures-util",
    "mio",
    "sqlx",
    "axum",
    "reqwest",
    "hyper",
    "hyper-util",
    "tower",
    "tower-http",
    "nix",
    "libc",
    "getrandom",
    "tempfile",
    "tracing-subscriber",
    "prometheus-client",
    "tar",
    "flate2",
    "hangar-store",
    "hangar-client",
    "hangar-web",
    "hangar-worker",
    "hangar-volumes",
    "hangar-resources",
    "hangar-images",
    "hangar-testkit",
    "hangar-bench",
    "hangar-creds",
    "hangar-control",
];

/// What a crate's normal dependencies may not name.
struct DependencyRule {
    krate: &'static str,
    /// None of these.
    forbidden: &'static [&'static str],
    /// If set, of the workspace's own crates only these.
    workspace_only: Option<&'static [&'static str]>,
    why: &'static str,
}

const DEPENDENCY_RULES: &[DependencyRule] = &[
    DependencyRule {
        krate: "hangar-core",
        forbidden: IO_CRATES,
        workspace_only: None,
        why: "the pure domain does no I/O, reads no clock and has no async code",
    },
    DependencyRule {
        krate: "hangar-api",
        forbidden: &["sqlx", "tokio"],
        workspace_only: None,
        why: "the wire types are shared with the CLI and know no database or runtime",
    },
    DependencyRule {
        krate: "hangar-engine",
        forbidden: &["axum", "tower-http", "hangar-web", "hangar-worker"],
        workspace_only: None,
        why: "the engine runs builds; serving HTTP is web's",
    },
    DependencyRule {
        krate: "hangar-control",
        forbidden: &["axum", "tower-http", "maud", "hangar-web", "hangar-worker"],
        workspace_only: Some(&["hangar-core", "hangar-engine", "hangar-store"]),
        why: "the control loops decide and act through the engine and the store; they serve nothing",
    },
    DependencyRule {
        krate: "hangar",
        forbidden: &["hangar-sim", "hangar-testkit", "hangar-tidy"],
        workspace_only: None,
        why: "the binary links only what it runs; the simulation and test support are for tests",
    },
    DependencyRule {
        krate: "hangar-images",
        forbidden: &["axum", "sqlx", "tower-http"],
        workspace_only: Some(&[]),
        why: "fetching images is a library of its own: no server, no database, no other crate of hangar",
    },
    DependencyRule {
        krate: "hangar-creds",
        forbidden: &["axum", "sqlx", "tower-http"],
        workspace_only: Some(&["hangar-core"]),
        why: "credential managers read secrets and keep them in memory: no server, no database, \
              so no value can be stored or served from here",
    },
    DependencyRule {
        krate: "hangar-sim",
        forbidden: IO_CRATES,
        workspace_only: Some(&["hangar-core"]),
        why: "the simulation runs the core's rules in virtual time, with no I/O",
    },
];

/// Crates whose `.rs` files may contain SQL, and why.
const SQL_ALLOWED_IN: &[(&str, &str)] = &[
    ("hangar-store", "the one crate with the product's SQL"),
    (
        "hangar-testkit",
        "test support: makes, renames and disconnects throwaway test databases",
    ),
    (
        "hangar-tidy",
        "holds the SQL patterns and made-up violations",
    ),
];

/// Crates whose top-level modules (`src/*.rs`) import no circle of two.
const ACYCLIC_MODULES: &[&str] = &["hangar-engine", "hangar-control"];

/// Servers, and the only files of their `src/` that may name an HTTP
/// status: `error.rs` (the one error table) and `answer.rs` (the statuses
/// of answers that are not errors).
const STATUS_FILES: &[(&str, &[&str])] = &[
    ("hangar-web", &["error.rs", "answer.rs"]),
    ("hangar-worker", &["error.rs", "answer.rs"]),
];

/// A name and a matcher for one line of code.
type SqlPattern = (&'static str, fn(&str) -> bool);

/// What counts as SQL in a `.rs` file once comments are removed.
const SQL_PATTERNS: &[SqlPattern] = &[
    ("sqlx::query", |s| s.contains("sqlx::query")),
    ("\"SELECT ", |s| s.contains("\"SELECT ")),
    ("INSERT INTO", |s| s.contains("INSERT INTO")),
    ("DELETE FROM", |s| s.contains("DELETE FROM")),
    ("UPDATE … SET", has_update_set),
];

/// `UPDATE <table> SET`, the table name being one word.
fn has_update_set(s: &str) -> bool {
    let words: Vec<&str> = s
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .collect();
    words
        .windows(3)
        .any(|w| w[0] == "UPDATE" && w[2] == "SET" && w[1] != "SET")
}

/// One crate as the rules see it.
#[derive(Debug)]
struct Crate {
    name: String,
    dir: PathBuf,
    manifest: toml::Table,
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/hangar-tidy is two levels below the workspace root")
        .to_path_buf()
}

fn parse_manifest(text: &str, what: &str) -> toml::Table {
    text.parse::<toml::Table>()
        .unwrap_or_else(|e| panic!("{what} is not valid TOML: {e}"))
}

fn workspace_crates() -> Vec<Crate> {
    let root = workspace_root();
    let mut crates = Vec::new();
    for entry in fs::read_dir(root.join("crates")).expect("read crates/") {
        let dir = entry.unwrap().path();
        let path = dir.join("Cargo.toml");
        let Ok(text) = fs::read_to_string(&path) else {
            continue;
        };
        let manifest = parse_manifest(&text, &path.display().to_string());
        let name = manifest["package"]["name"]
            .as_str()
            .unwrap_or_else(|| panic!("{} has no package.name", path.display()))
            .to_string();
        crates.push(Crate {
            name,
            dir,
            manifest,
        });
    }
    crates.sort_by(|a, b| a.name.cmp(&b.name));
    assert!(
        crates.len() >= 10,
        "found only {} crates under {}",
        crates.len(),
        root.display()
    );
    crates
}

/// The package names of a manifest's normal dependencies (`package = …`
/// renames resolved), with the table they are in.
fn normal_dependencies(manifest: &toml::Table) -> BTreeMap<String, String> {
    let mut tables: Vec<(String, &toml::Table)> = Vec::new();
    if let Some(t) = manifest.get("dependencies").and_then(|t| t.as_table()) {
        tables.push(("[dependencies]".into(), t));
    }
    if let Some(targets) = manifest.get("target").and_then(|t| t.as_table()) {
        for (cfg, target) in targets {
            if let Some(t) = target.get("dependencies").and_then(|t| t.as_table()) {
                tables.push((format!("[target.{cfg}.dependencies]"), t));
            }
        }
    }
    let mut deps = BTreeMap::new();
    for (table, t) in tables {
        for (key, spec) in t {
            let package = spec
                .get("package")
                .and_then(|p| p.as_str())
                .unwrap_or(key)
                .to_string();
            deps.insert(package, table.clone());
        }
    }
    deps
}

/// Every way `crates` break `rules`, one line each.
fn check_dependencies(crates: &[Crate], rules: &[DependencyRule]) -> Vec<String> {
    let mut problems = Vec::new();
    for rule in rules {
        let Some(krate) = crates.iter().find(|c| c.name == rule.krate) else {
            problems.push(format!(
                "{}: a dependency rule names this crate but the workspace has none by that name \
                 (renamed? update the rule)",
                rule.krate
            ));
            continue;
        };
        for (dep, table) in normal_dependencies(&krate.manifest) {
            if rule.forbidden.contains(&dep.as_str()) {
                problems.push(format!(
                    "{}: depends on {dep} ({table}), which it must not: {}",
                    rule.krate, rule.why
                ));
            } else if let Some(only) = rule.workspace_only {
                let is_workspace_crate = crates.iter().any(|c| c.name == dep);
                if is_workspace_crate && !only.contains(&dep.as_str()) {
                    problems.push(format!(
                        "{}: depends on {dep} ({table}); of this workspace's crates it may \
                         depend on {} only: {}",
                        rule.krate,
                        only.join(", "),
                        rule.why
                    ));
                }
            }
        }
    }
    problems
}

fn check_lints(crates: &[Crate]) -> Vec<String> {
    crates
        .iter()
        .filter(|c| {
            c.manifest
                .get("lints")
                .and_then(|l| l.get("workspace"))
                .and_then(|w| w.as_bool())
                != Some(true)
        })
        .map(|c| {
            format!(
                "{}: Cargo.toml lacks `[lints] workspace = true` (every crate takes the \
                 workspace's lints)",
                c.name
            )
        })
        .collect()
}

/// Rust source with comments replaced by spaces (newlines kept, so line
/// numbers stay); string and char literals are kept as they are.
fn strip_comments(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    let blank = |ch: char| if ch == '\n' { '\n' } else { ' ' };
    while i < c.len() {
        match c[i] {
            '/' if c.get(i + 1) == Some(&'/') => {
                while i < c.len() && c[i] != '\n' {
                    out.push(' ');
                    i += 1;
                }
            }
            '/' if c.get(i + 1) == Some(&'*') => {
                let mut depth = 0;
                while i < c.len() {
                    if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                        depth += 1;
                        out.push_str("  ");
                        i += 2;
                    } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                        depth -= 1;
                        out.push_str("  ");
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        out.push(blank(c[i]));
                        i += 1;
                    }
                }
            }
            'r' if matches!(c.get(i + 1), Some('"' | '#'))
                && (i == 0 || !(c[i - 1].is_alphanumeric() || c[i - 1] == '_')) =>
            {
                // A raw string: r"…", r#"…"#, …
                let mut j = i + 1;
                let mut hashes = 0;
                while c.get(j) == Some(&'#') {
                    hashes += 1;
                    j += 1;
                }
                if c.get(j) != Some(&'"') {
                    out.push(c[i]);
                    i += 1;
                    continue;
                }
                j += 1;
                loop {
                    match c.get(j) {
                        None => break,
                        Some('"') if (1..=hashes).all(|k| c.get(j + k) == Some(&'#')) => {
                            j += 1 + hashes;
                            break;
                        }
                        _ => j += 1,
                    }
                }
                out.extend(&c[i..j.min(c.len())]);
                i = j;
            }
            '"' => {
                let start = i;
                i += 1;
                while i < c.len() && c[i] != '"' {
                    i += if c[i] == '\\' { 2 } else { 1 };
                }
                i = (i + 1).min(c.len());
                out.extend(&c[start..i]);
            }
            '\'' => {
                // A char literal ('x', '\n', '\''), else a lifetime.
                let end = if c.get(i + 1) == Some(&'\\') {
                    (i + 2..c.len()).find(|&k| c[k] == '\'').map(|k| k + 1)
                } else if c.get(i + 2) == Some(&'\'') {
                    Some(i + 3)
                } else {
                    None
                };
                let end = end.unwrap_or(i + 1).min(c.len());
                out.extend(&c[i..end]);
                i = end;
            }
            ch => {
                out.push(ch);
                i += 1;
            }
        }
    }
    out
}

/// The SQL found in one file's text: (line, pattern) for each hit.
fn sql_in(src: &str) -> Vec<(usize, &'static str)> {
    let code = strip_comments(src);
    let mut hits = Vec::new();
    for (n, line) in code.lines().enumerate() {
        for (name, matches) in SQL_PATTERNS {
            if matches(line) {
                hits.push((n + 1, *name));
            }
        }
    }
    hits
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') {
                rust_files(&path, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

/// Every `.rs` file of `crates` outside [`SQL_ALLOWED_IN`] that holds SQL,
/// read through `read`.
fn check_sql(crates: &[(String, Vec<PathBuf>)], read: &dyn Fn(&Path) -> String) -> Vec<String> {
    let mut problems = Vec::new();
    for (name, files) in crates {
        if SQL_ALLOWED_IN.iter().any(|(allowed, _)| allowed == name) {
            continue;
        }
        for file in files {
            for (line, pattern) in sql_in(&read(file)) {
                let shown = file.strip_prefix(workspace_root()).unwrap_or(file);
                problems.push(format!(
                    "{}:{line}: SQL ({pattern}) outside hangar-store; it belongs in the store",
                    shown.display()
                ));
            }
        }
    }
    problems
}

/// The lines of one file's code (comments aside) that name a status.
fn statuses_in(src: &str) -> Vec<usize> {
    strip_comments(src)
        .lines()
        .enumerate()
        .filter(|(_, line)| line.contains("StatusCode::"))
        .map(|(n, _)| n + 1)
        .collect()
}

/// Every file of a server's `src/` (in [`STATUS_FILES`]) outside its
/// allowed files that names a status, read through `read`.
fn check_statuses(
    crates: &[(String, Vec<PathBuf>)],
    read: &dyn Fn(&Path) -> String,
) -> Vec<String> {
    let mut problems = Vec::new();
    for (name, files) in crates {
        let Some((_, allowed)) = STATUS_FILES.iter().find(|(k, _)| k == name) else {
            continue;
        };
        for file in files {
            let file_name = file.file_name().unwrap_or_default().to_string_lossy();
            if allowed.iter().any(|a| *a == file_name) {
                continue;
            }
            for line in statuses_in(&read(file)) {
                let shown = file.strip_prefix(workspace_root()).unwrap_or(file);
                problems.push(format!(
                    "{}:{line}: an HTTP status chosen outside {name}'s error.rs/answer.rs",
                    shown.display()
                ));
            }
        }
    }
    problems
}

/// The top-level modules (`crate::name`) one file's code names.
fn modules_named(src: &str) -> std::collections::BTreeSet<String> {
    let code = strip_comments(src);
    let mut named = std::collections::BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        if !name.is_empty() {
            named.insert(name);
        }
    }
    named
}

/// Each pair of top-level modules of one crate that name each other,
/// given each module's name and source.
fn module_circles(modules: &[(String, String)]) -> Vec<String> {
    let names: BTreeMap<&str, std::collections::BTreeSet<String>> = modules
        .iter()
        .map(|(m, src)| (m.as_str(), modules_named(src)))
        .collect();
    let mut problems = Vec::new();
    for (a, named) in &names {
        for b in named {
            let back = names.get(b.as_str()).is_some_and(|n| n.contains(*a));
            if *a < b.as_str() && back {
                problems.push(format!("{a} and {b} import each other"));
            }
        }
    }
    problems
}

/// The lines of one file's code (comments aside) that detach a task.
fn detached_spawns(src: &str) -> Vec<usize> {
    strip_comments(src)
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains("tokio::spawn(") || l.contains("tokio::task::spawn("))
        .map(|(n, _)| n + 1)
        .collect()
}

/// The lines of one file's code (comments aside) that serve HTTP without
/// deadlines.
fn undeadlined_servers(src: &str) -> Vec<usize> {
    strip_comments(src)
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains("axum::serve("))
        .map(|(n, _)| n + 1)
        .collect()
}

fn report(what: &str, problems: Vec<String>) {
    assert!(problems.is_empty(), "{what}:\n  {}", problems.join("\n  "));
}

#[test]
fn every_crate_keeps_its_dependency_rules() {
    report(
        "dependency rules broken",
        check_dependencies(&workspace_crates(), DEPENDENCY_RULES),
    );
}

#[test]
fn every_crate_takes_the_workspace_lints() {
    report(
        "crates without the workspace's lints",
        check_lints(&workspace_crates()),
    );
}

#[test]
fn sql_stays_in_hangar_store() {
    let crates: Vec<(String, Vec<PathBuf>)> = workspace_crates()
        .into_iter()
        .map(|c| {
            let mut files = Vec::new();
            rust_files(&c.dir, &mut files);
            (c.name, files)
        })
        .collect();
    let total: usize = crates.iter().map(|(_, f)| f.len()).sum();
    assert!(total > 100, "found only {total} .rs files");
    report(
        "SQL outside hangar-store",
        check_sql(&crates, &|p| {
            fs::read_to_string(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
        }),
    );
}

#[test]
fn servers_choose_statuses_only_in_their_error_table_and_answers() {
    let crates: Vec<(String, Vec<PathBuf>)> = workspace_crates()
        .into_iter()
        .map(|c| {
            let mut files = Vec::new();
            rust_files(&c.dir.join("src"), &mut files);
            (c.name, files)
        })
        .collect();
    for (server, _) in STATUS_FILES {
        let files = crates
            .iter()
            .find(|(n, _)| n == server)
            .map(|(_, f)| f.len());
        assert!(files.unwrap_or(0) > 5, "{server} has no src files to check");
    }
    report(
        "HTTP statuses outside the error tables",
        check_statuses(&crates, &|p| {
            fs::read_to_string(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
        }),
    );
}

#[test]
fn every_server_has_deadlines_and_caps() {
    let mut problems = Vec::new();
    let mut checked = 0;
    for c in workspace_crates() {
        let mut files = Vec::new();
        rust_files(&c.dir.join("src"), &mut files);
        for file in files {
            checked += 1;
            let src = fs::read_to_string(&file)
                .unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
            for line in undeadlined_servers(&src) {
                let shown = file.strip_prefix(workspace_root()).unwrap_or(&file);
                problems.push(format!(
                    "{}:{line}: axum::serve sets no deadline and no connection cap; use hangar_http::serve",
                    shown.display()
                ));
            }
        }
    }
    assert!(checked > 100, "found only {checked} .rs files");
    report("servers without deadlines", problems);
}

#[test]
fn the_server_rule_catches_axum_serve_but_not_a_comment() {
    let file = "//! Unlike axum::serve(l, app), ...\nlet s = axum::serve(listener, app);\nhangar_http::serve(l, app, limits, stop);\n";
    assert_eq!(undeadlined_servers(file), [2]);
}

#[test]
fn the_engine_s_and_the_loops_modules_import_no_circle_and_detach_no_task() {
    for krate in ACYCLIC_MODULES {
        let dir = workspace_root().join("crates").join(krate).join("src");
        let mut modules = Vec::new();
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "rs") {
                let name = path.file_stem().unwrap().to_string_lossy().into_owned();
                modules.push((name, fs::read_to_string(&path).unwrap()));
            }
        }
        assert!(modules.len() > 3, "{krate}: too few modules found");
        report(
            &format!("{krate}: module circles"),
            module_circles(&modules),
        );
    }
}

// The rules can fail: each is fed a made-up crate or file that breaks it.

fn made_up(name: &str, manifest: &str) -> Crate {
    Crate {
        name: name.into(),
        dir: PathBuf::from(format!("crates/{name}")),
        manifest: parse_manifest(manifest, name),
    }
}

#[test]
fn the_dependency_rule_catches_io_crates_in_the_core_and_sqlx_or_tokio_in_the_api() {
    let crates = [
        made_up(
            "hangar-core",
            "[package]\nname = \"hangar-core\"\n[dependencies]\nserde.workspace = true\n\
             tokio = \"1\"\nstore = { package = \"hangar-store\", path = \"../hangar-store\" }\n\
             [target.'cfg(unix)'.dependencies]\nreqwest = \"0.12\"\n\
             [dev-dependencies]\ntempfile = \"3\"\n",
        ),
        made_up(
            "hangar-api",
            "[package]\nname = \"hangar-api\"\n[dependencies]\nsqlx = \"0.8\"\n\
             tokio = { version = \"1\", optional = true }\naxum = { version = \"0.8\", optional = true }\n",
        ),
    ];
    let problems = check_dependencies(&crates, CORE_AND_API_RULES);
    let said = |what: &str| problems.iter().any(|p| p.contains(what));
    assert!(
        said("hangar-core: depends on tokio ([dependencies])"),
        "{problems:#?}"
    );
    assert!(
        said("hangar-core: depends on hangar-store"),
        "{problems:#?}"
    );
    assert!(
        said("hangar-core: depends on reqwest ([target.cfg(unix).dependencies])"),
        "{problems:#?}"
    );
    assert!(said("hangar-api: depends on sqlx"), "{problems:#?}");
    assert!(said("hangar-api: depends on tokio"), "{problems:#?}");
    // Dev-dependencies are not the crate's own; axum is allowed in the API.
    assert!(
        !said("tempfile") && !said("axum") && !said("serde"),
        "{problems:#?}"
    );
    assert_eq!(problems.len(), 5, "{problems:#?}");
}

/// The rules of the core and the API (the first two), for the tests that
/// feed made-up manifests of those two crates alone.
const CORE_AND_API_RULES: &[DependencyRule] = DEPENDENCY_RULES.split_at(2).0;

#[test]
fn a_rule_for_a_crate_the_workspace_lacks_is_an_error() {
    let crates = [made_up("hangar-api", "[package]\nname = \"hangar-api\"\n")];
    let problems = check_dependencies(&crates, CORE_AND_API_RULES);
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert!(problems[0].starts_with("hangar-core: a dependency rule names this crate"));
}

#[test]
fn the_workspace_only_rule_catches_other_workspace_crates_but_not_outside_ones() {
    // As the hangar-sim rule is written.
    let rules = [DependencyRule {
        krate: "hangar-sim",
        forbidden: IO_CRATES,
        workspace_only: Some(&["hangar-core"]),
        why: "test",
    }];
    let crates = [
        made_up(
            "hangar-sim",
            "[package]\nname = \"hangar-sim\"\n[dependencies]\nhangar-core.workspace = true\n\
             hangar-api.workspace = true\nserde = \"1\"\nhangar-store.workspace = true\n",
        ),
        made_up("hangar-core", "[package]\nname = \"hangar-core\"\n"),
        made_up("hangar-api", "[package]\nname = \"hangar-api\"\n"),
        made_up("hangar-store", "[package]\nname = \"hangar-store\"\n"),
    ];
    let problems = check_dependencies(&crates, &rules);
    assert_eq!(problems.len(), 2, "{problems:#?}");
    assert!(
        problems[0].contains("depends on hangar-api"),
        "{problems:#?}"
    );
    assert!(
        problems[0].contains("may depend on hangar-core only"),
        "{problems:#?}"
    );
    assert!(
        problems[1].contains("depends on hangar-store"),
        "{problems:#?}"
    );
    assert!(problems[1].contains("which it must not"), "{problems:#?}");
}

#[test]
fn the_lints_rule_catches_a_crate_without_workspace_lints() {
    let crates = [
        made_up("a", "[package]\nname = \"a\"\n[lints]\nworkspace = true\n"),
        made_up("b", "[package]\nname = \"b\"\n"),
        made_up("c", "[package]\nname = \"c\"\n[lints]\nworkspace = false\n"),
    ];
    let problems = check_lints(&crates);
    assert_eq!(problems.len(), 2, "{problems:#?}");
    assert!(problems[0].starts_with("b: ") && problems[1].starts_with("c: "));
}

#[test]
fn the_sql_rule_catches_each_pattern_outside_the_store_and_ignores_comments() {
    let file = r##"
// SELECT * FROM workers is fine in a comment, as is UPDATE workers SET x.
/* INSERT INTO volumes, /* nested */ DELETE FROM volumes */
/// sqlx::query in a doc comment
fn f() {
    let url = "http://example//not a comment"; let a = sqlx::query("x");
    let b = "SELECT id FROM workers";
    let c = format!("INSERT INTO builds VALUES ({})", 1);
    let d = r#"DELETE FROM volumes WHERE "x""#;
    let e = "UPDATE workers SET state = 'x'";
    let f = 'x'; let g: &'static str = "nothing here";
}
"##;
    assert_eq!(
        sql_in(file),
        [
            (6, "sqlx::query"),
            (7, "\"SELECT "),
            (8, "INSERT INTO"),
            (9, "DELETE FROM"),
            (10, "UPDATE … SET"),
        ]
    );
    let crates = [
        ("hangar-web".to_string(), vec![PathBuf::from("web.rs")]),
        ("hangar-store".to_string(), vec![PathBuf::from("store.rs")]),
    ];
    let problems = check_sql(&crates, &|_| file.to_string());
    assert_eq!(problems.len(), 5, "{problems:#?}");
    assert!(
        problems.iter().all(|p| p.starts_with("web.rs:")),
        "{problems:#?}"
    );
    assert!(sql_in("let x = \"// UPDATE a SET b\";").len() == 1);
    assert!(sql_in("// let x = \"UPDATE a SET b\";").is_empty());
    assert!(sql_in("let s = \"select * from a\"; // lower case is not matched").is_empty());
}

#[test]
fn the_status_rule_catches_a_handler_naming_a_status_but_not_the_error_table() {
    let file = r##"
// StatusCode::CONFLICT in a comment is fine.
fn f() -> Result<StatusCode, ApiError> {
    Err(ApiError::new(StatusCode::CONFLICT, "conflict", "x"))
}
"##;
    assert_eq!(statuses_in(file), [4]);
    let crates = [
        (
            "hangar-web".to_string(),
            vec![
                PathBuf::from("routes/pipelines.rs"),
                PathBuf::from("error.rs"),
                PathBuf::from("answer.rs"),
            ],
        ),
        (
            "hangar-client".to_string(),
            vec![PathBuf::from("client.rs")],
        ),
    ];
    let problems = check_statuses(&crates, &|_| file.to_string());
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert!(
        problems[0].starts_with("routes/pipelines.rs:4:"),
        "{problems:#?}"
    );
}

#[test]
fn the_circle_rule_catches_two_modules_naming_each_other_and_ignores_comments() {
    let modules = [
        (
            "context".to_string(),
            "use crate::check::keep_log;\n".to_string(),
        ),
        (
            "check".to_string(),
            "use crate::context::Ctx; // crate::watch\n".to_string(),
        ),
        (
            "watch".to_string(),
            "/// See crate::check.\nfn f() {}\n".to_string(),
        ),
        ("runner".to_string(), "use crate::watch;\n".to_string()),
    ];
    assert_eq!(
        module_circles(&modules),
        ["check and context import each other"]
    );
}

#[test]
fn the_owned_task_rule_catches_a_detached_spawn_but_not_a_join_set_or_a_comment() {
    let file = "// tokio::spawn(x) in a comment\nlet t = tokio::spawn(async {});\ntasks.spawn(work());\nlet u = tokio::task::spawn(f);\n";
    assert_eq!(detached_spawns(file), [2, 4]);
}
