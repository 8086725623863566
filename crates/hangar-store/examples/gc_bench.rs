//! Benchmarks of reconciliation and garbage collection.
//!
//! ```sh
//! HANGAR_BENCH_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/postgres \
//!   cargo run --release -p hangar-store --example gc_bench
//! ```
//!
//! The URL is an admin URL of a cluster the benchmark may create (and drop)
//! databases on; `HANGAR_TEST_POSTGRES_URL` is used when the first is unset,
//! or pass it as the first argument. Prints:
//!
//! 1. a 50,000-volume report diffed and applied, on SQLite (a file) and on
//!    PostgreSQL;
//! 2. the missing-volume collector over 1,000,000 rows in chains of ten, of
//!    which 100,000 are missing past the grace period (9,000 whole chains,
//!    and 10,000 chains whose base alone is missing: their 90,000 live
//!    descendants go too), on PostgreSQL;
//! 3. for comparison, the same rows deleted the way Concourse does it: one
//!    transaction, the parent foreign key DEFERRABLE INITIALLY DEFERRED, one
//!    recursive CTE collecting missing volumes and their descendants and
//!    deleting them in a single statement;
//! 4. the floor: the same rows seeded again and deleted by handle with one
//!    plain `DELETE … WHERE handle = ANY($1)`; and the ratios of hangar's
//!    collector to both.

// An example reports what it measured on stdout and stderr.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::time::{Duration, Instant};

use hangar_core::gc::{Collector, GcConfig};
use hangar_store::{Backend, Store, WorkerInfo};
use sqlx::any::AnyPoolOptions;
use sqlx::{AnyPool, Connection};

const T0: i64 = 1_700_000_000_000;
const MIN: i64 = 60_000;

fn info(name: &str) -> WorkerInfo {
    WorkerInfo {
        name: name.into(),
        state_identity: name.into(),
        platform: "linux".into(),
        tags: vec![],
        team: None,
        version: "bench".into(),
        resource_types_json: "[]".into(),
        ephemeral: false,
        containers: 0,
        volumes: 0,
        api_url: None,
        allow_privileged: false,
    }
}

async fn raw_pool(url: &str) -> AnyPool {
    sqlx::any::install_default_drivers();
    AnyPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
        .unwrap_or_else(|e| panic!("connect {url}: {e}"))
}

async fn exec(pool: &AnyPool, sql: &str) {
    sqlx::query(sql)
        .execute(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// A fresh database on the cluster; returns its URL and name.
async fn fresh_postgres(admin: &str, tag: &str) -> (String, String) {
    let name = format!(
        "hangar_bench_{tag}_{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
    );
    let mut conn = sqlx::PgConnection::connect(admin)
        .await
        .expect("connect admin");
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut conn)
        .await
        .expect("create database");
    let base = admin.rsplit_once('/').map(|(b, _)| b).unwrap_or(admin);
    (format!("{base}/{name}"), name)
}

async fn drop_postgres(admin: &str, name: &str) {
    let mut conn = sqlx::PgConnection::connect(admin)
        .await
        .expect("connect admin");
    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .execute(&mut conn)
        .await;
}

/// `SELECT` of `n` rows numbered `i` from 0, in the backend's dialect, for
/// `INSERT … SELECT`.
fn numbers(backend: Backend, n: i64) -> (String, String) {
    match backend {
        Backend::Postgres => (
            String::new(),
            format!("generate_series(0, {}) AS s(i)", n - 1),
        ),
        Backend::Sqlite => (
            format!(
                "WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i < {}) ",
                n - 1
            ),
            "s".to_string(),
        ),
    }
}

const REPORT_ROWS: i64 = 50_000;
/// Reports measured per database, each by a worker of its own, so the
/// figure is a median and a worst rather than one draw of a noisy machine.
const REPORT_ROUNDS: usize = 7;

/// Seeds 50,000 created volumes in chains of five on `worker`, 1,000 of
/// the leaves `destroying`; returns the report the worker sends: every
/// handle but 2,500 vanished created ones and the 1,000 destroyed ones, and
/// 2,500 strays.
async fn seed_report(store: &Store, url: &str, worker: &str) -> (i64, Vec<String>) {
    let generation = store
        .register_worker(&info(worker), T0)
        .await
        .unwrap()
        .generation;
    let pool = raw_pool(url).await;
    let (with, from) = numbers(store.backend(), REPORT_ROWS);
    exec(
        &pool,
        &format!(
            "{with}INSERT INTO volumes (handle, worker_name, state, parent_handle, owner_kind, owner_id, \
             strategy, size_bytes, created_at, missing_since) \
             SELECT '{worker}-vol-' || i, '{worker}', \
               CASE WHEN i % 5 = 4 AND i % 50 = 4 THEN 'destroying' ELSE 'created' END, \
               CASE WHEN i % 5 = 0 THEN NULL ELSE '{worker}-vol-' || (i - 1) END, \
               'container', NULL, 'cow', 1, {T0}, NULL FROM {from}"
        ),
    )
    .await;
    if store.backend() == Backend::Postgres {
        // As autovacuum would have by the time a worker reports: planned on
        // the rows as they are.
        exec(&pool, "ANALYZE volumes").await;
    }
    pool.close().await;
    let mut report = Vec::with_capacity(REPORT_ROWS as usize);
    for i in 0..REPORT_ROWS {
        let destroyed = i % 5 == 4 && i % 50 == 4;
        let vanished = i % 20 == 3;
        if !destroyed && !vanished {
            report.push(format!("{worker}-vol-{i}"));
        }
    }
    report.extend((0..2_500).map(|i| format!("{worker}-stray-{i}")));
    (generation, report)
}

/// One database's report figures: each round's first report (2,500 rows
/// marked missing, 1,000 deleted), the same report again (nothing
/// changes, but strays to destroy: the rows are read), and, once the
/// strays are gone, a quiet report (no row read), in milliseconds.
struct ReportFigures {
    changing_ms: Vec<f64>,
    unchanged_ms: Vec<f64>,
    quiet_ms: Vec<f64>,
    what: String,
}

async fn report_bench(store: &Store, url: &str) -> ReportFigures {
    let mut figures = ReportFigures {
        changing_ms: Vec::new(),
        unchanged_ms: Vec::new(),
        quiet_ms: Vec::new(),
        what: String::new(),
    };
    for round in 0..REPORT_ROUNDS {
        let worker = format!("w{round}");
        let (generation, report) = seed_report(store, url, &worker).await;
        let started = Instant::now();
        let plan = store
            .apply_volume_report(&worker, generation, &report, T0 + MIN)
            .await
            .unwrap();
        figures.changing_ms.push(ms(started.elapsed()));
        figures.what = format!(
            "{} handles reported: {} marked missing, {} rows deleted, {} strays to destroy",
            report.len(),
            plan.mark_missing.len(),
            plan.delete_rows.len(),
            plan.destroy_on_worker.len()
        );
        let started = Instant::now();
        let steady = store
            .apply_volume_report(&worker, generation, &report, T0 + 2 * MIN)
            .await
            .unwrap();
        figures.unchanged_ms.push(ms(started.elapsed()));
        assert!(steady.mark_missing.is_empty() && steady.delete_rows.is_empty());
        // The worker destroyed its strays: its next report is planned to
        // nothing and recorded quiet, and the one after reads no row.
        let kept: Vec<String> = report
            .iter()
            .filter(|h| !h.contains("-stray-"))
            .cloned()
            .collect();
        let settled = store
            .apply_volume_report_counted(&worker, generation, &kept, T0 + 3 * MIN)
            .await
            .unwrap();
        assert!(settled.read_rows && settled.plan == Default::default());
        let started = Instant::now();
        let quiet = store
            .apply_volume_report_counted(&worker, generation, &kept, T0 + 4 * MIN)
            .await
            .unwrap();
        figures.quiet_ms.push(ms(started.elapsed()));
        assert!(!quiet.read_rows);
    }
    figures
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// `median / worst (every round)` of a list of milliseconds.
fn median_worst(values: &[f64]) -> String {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let each: Vec<String> = values.iter().map(|v| format!("{v:.0}")).collect();
    format!(
        "median {:.0} ms, worst {:.0} ms ({})",
        sorted[sorted.len() / 2],
        sorted[sorted.len() - 1],
        each.join(" ")
    )
}

fn print_report(database: &str, f: &ReportFigures) {
    println!("  {database}: {}", f.what);
    println!("    changing:  {}", median_worst(&f.changing_ms));
    println!("    unchanged: {}", median_worst(&f.unchanged_ms));
    println!("    quiet:     {}", median_worst(&f.quiet_ms));
}

const GC_ROWS: i64 = 1_000_000;
const CHAIN: i64 = 10;

/// The chain layout of the GC benchmark: `i` is row `i % 10` of chain
/// `i / 10`; chains `c % 100 < 9` are missing whole, chains
/// `9 <= c % 100 < 19` only at their base.
fn gc_select(backend: Backend) -> String {
    let (with, from) = numbers(backend, GC_ROWS);
    format!(
        "{with}SELECT 'v' || i, 'w' || ((i / {CHAIN}) % 10), 'created', \
           CASE WHEN i % {CHAIN} = 0 THEN NULL ELSE 'v' || (i - 1) END, \
           'container', NULL, 'cow', 1, {T0}, \
           CASE WHEN (i / {CHAIN}) % 100 < 9 THEN {T0} \
                WHEN (i / {CHAIN}) % 100 < 19 AND i % {CHAIN} = 0 THEN {T0} \
                ELSE NULL END \
         FROM {from}"
    )
}

async fn gc_bench(admin: &str) {
    let (url, name) = fresh_postgres(admin, "gc").await;
    let store = Store::open(&url).await.expect("open store");
    for w in 0..10 {
        store
            .register_worker(&info(&format!("w{w}")), T0)
            .await
            .unwrap();
    }
    let pool = raw_pool(&url).await;
    let started = Instant::now();
    exec(
        &pool,
        &format!(
            "INSERT INTO volumes (handle, worker_name, state, parent_handle, owner_kind, owner_id, \
             strategy, size_bytes, created_at, missing_since) {}",
            gc_select(Backend::Postgres)
        ),
    )
    .await;
    // Concourse's shape: the same rows, the parent key deferrable.
    exec(
        &pool,
        "CREATE TABLE cc_volumes (handle TEXT PRIMARY KEY, worker_name TEXT NOT NULL, state TEXT NOT NULL, \
         parent_handle TEXT REFERENCES cc_volumes (handle) DEFERRABLE INITIALLY DEFERRED, \
         owner_kind TEXT NOT NULL, owner_id TEXT, strategy TEXT NOT NULL, size_bytes BIGINT, \
         created_at BIGINT NOT NULL, missing_since BIGINT)",
    )
    .await;
    exec(&pool, "INSERT INTO cc_volumes SELECT handle, worker_name, state, parent_handle, owner_kind, owner_id, strategy, size_bytes, created_at, missing_since FROM volumes").await;
    exec(
        &pool,
        "CREATE INDEX cc_volumes_by_parent ON cc_volumes (parent_handle)",
    )
    .await;
    exec(&pool, "CREATE INDEX cc_volumes_missing ON cc_volumes (missing_since) WHERE missing_since IS NOT NULL").await;
    exec(&pool, "VACUUM ANALYZE volumes").await;
    exec(&pool, "VACUUM ANALYZE cc_volumes").await;
    let seeded = started.elapsed();
    let count = |table: &'static str| {
        let pool = pool.clone();
        async move {
            let n: i64 = sqlx::Row::get(
                &sqlx::query(&format!("SELECT COUNT(*) FROM {table}"))
                    .fetch_one(&pool)
                    .await
                    .unwrap(),
                0,
            );
            n
        }
    };
    let missing: i64 = sqlx::Row::get(
        &sqlx::query("SELECT COUNT(*) FROM volumes WHERE missing_since IS NOT NULL")
            .fetch_one(&pool)
            .await
            .unwrap(),
        0,
    );
    println!(
        "  seeded {} rows ({missing} missing) twice in {:.1} s",
        count("volumes").await,
        seeded.as_secs_f64()
    );

    // HANGAR_BENCH_GC_BATCH: the collector's batch size (default: web's).
    let mut config = GcConfig::default();
    if let Some(n) = std::env::var("HANGAR_BENCH_GC_BATCH")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        config.batch_size = n;
    }
    let now = T0 + config.missing_grace_ms;
    let started = Instant::now();
    let stats = store
        .run_collector(Collector::MissingVolumes, &config, now)
        .await
        .unwrap();
    let ours = started.elapsed();
    assert_eq!(stats.failed, 0);
    println!(
        "  hangar: missing-volumes collector deleted {} rows (found {}, failed {}) in {:.2} s, batches of {}",
        stats.destroyed,
        stats.found,
        stats.failed,
        ours.as_secs_f64(),
        config.batch_size
    );

    let started = Instant::now();
    let mut tx = pool.begin().await.unwrap();
    let deleted = sqlx::query(&format!(
        "WITH RECURSIVE doomed (handle) AS ( \
             SELECT handle FROM cc_volumes WHERE missing_since IS NOT NULL AND missing_since <= {cutoff} \
           UNION \
             SELECT v.handle FROM cc_volumes v JOIN doomed d ON v.parent_handle = d.handle \
         ) DELETE FROM cc_volumes WHERE handle IN (SELECT handle FROM doomed)",
        cutoff = config.missing_cutoff(now)
    ))
    .execute(&mut *tx)
    .await
    .unwrap()
    .rows_affected();
    tx.commit().await.unwrap();
    let theirs = started.elapsed();
    println!(
        "  Concourse-style deferred-constraint recursive CTE delete: {deleted} rows in {:.2} s",
        theirs.as_secs_f64()
    );
    assert_eq!(deleted, stats.destroyed, "both deleted the same rows");
    assert_eq!(count("volumes").await, count("cc_volumes").await);

    // The floor: the same rows seeded again, then deleted by handle in one
    // statement (the parent key is checked at the statement's end, so the
    // order of the handles does not matter).
    exec(
        &pool,
        &format!(
            "INSERT INTO volumes (handle, worker_name, state, parent_handle, owner_kind, owner_id, \
             strategy, size_bytes, created_at, missing_since) {} WHERE (i / {CHAIN}) % 100 < 19",
            gc_select(Backend::Postgres)
        ),
    )
    .await;
    exec(&pool, "VACUUM ANALYZE volumes").await;
    let doomed: Vec<String> = (0..GC_ROWS)
        .filter(|i| (i / CHAIN) % 100 < 19)
        .map(|i| format!("v{i}"))
        .collect();
    let mut conn = sqlx::PgConnection::connect(&url).await.expect("connect");
    let started = Instant::now();
    let mut tx = conn.begin().await.unwrap();
    let plain = sqlx::query("DELETE FROM volumes WHERE handle = ANY($1)")
        .bind(&doomed)
        .execute(&mut *tx)
        .await
        .unwrap()
        .rows_affected();
    tx.commit().await.unwrap();
    let floor = started.elapsed();
    conn.close().await.unwrap();
    println!(
        "  plain delete of the same rows by handle (one statement, handle = ANY($1)): {plain} rows in {:.2} s",
        floor.as_secs_f64()
    );
    assert_eq!(plain, stats.destroyed, "the floor deleted the same rows");
    println!(
        "  ratio hangar / Concourse-style: {:.2} ({:.1}x faster)",
        ours.as_secs_f64() / theirs.as_secs_f64(),
        theirs.as_secs_f64() / ours.as_secs_f64()
    );
    println!(
        "  ratio hangar / plain delete: {:.2}",
        ours.as_secs_f64() / floor.as_secs_f64()
    );
    pool.close().await;
    store.close().await;
    drop_postgres(admin, &name).await;
}

#[tokio::main]
async fn main() {
    let admin = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("HANGAR_BENCH_POSTGRES_URL").ok())
        .or_else(|| std::env::var("HANGAR_TEST_POSTGRES_URL").ok())
        .expect("give a PostgreSQL admin URL: first argument, HANGAR_BENCH_POSTGRES_URL or HANGAR_TEST_POSTGRES_URL");

    println!("report of {REPORT_ROWS} volumes, diffed and applied, {REPORT_ROUNDS} rounds:");
    let dir = std::env::temp_dir().join(format!("hangar-gc-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sqlite_url = format!("sqlite://{}", dir.join("bench.db").display());
    let store = Store::open(&sqlite_url).await.expect("open sqlite");
    let figures = report_bench(&store, &format!("{sqlite_url}?mode=rwc")).await;
    store.close().await;
    print_report("sqlite", &figures);
    let _ = std::fs::remove_dir_all(&dir);

    let (url, name) = fresh_postgres(&admin, "report").await;
    let store = Store::open(&url).await.expect("open postgres");
    let figures = report_bench(&store, &url).await;
    store.close().await;
    drop_postgres(&admin, &name).await;
    print_report("postgres", &figures);

    // HANGAR_BENCH_SKIP_GC=1: the report figures only (a quick comparison).
    if std::env::var("HANGAR_BENCH_SKIP_GC").is_ok_and(|v| v == "1") {
        return;
    }
    println!("garbage collection of missing volumes among {GC_ROWS} rows, postgres:");
    gc_bench(&admin).await;
}
