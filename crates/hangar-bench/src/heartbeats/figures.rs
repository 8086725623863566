//! What one run of `hangar bench heartbeats` measured, and the summary over
//! runs, as JSON fields and as the one-line prints.

use serde::Serialize;

use crate::stats::{fmt_opt, Summary};

#[derive(Debug, Clone, Serialize)]
pub struct CallFigures {
    /// Calls answered successfully in the window.
    pub count: usize,
    pub errors: usize,
    /// Calls the fleet's schedule had due in the window (workers x window /
    /// interval): more than `count + errors` when the load generator or the
    /// nodes fell behind.
    pub due: usize,
    pub latency_ms: Summary,
}

/// One web node's figures over the window.
#[derive(Debug, Clone, Serialize)]
pub struct NodeFigures {
    pub node: usize,
    pub workers: usize,
    pub heartbeat_latency_ms: Summary,
    /// CPU time over the window divided by the window: 1.0 = one core.
    pub cpu_cores: f64,
    pub rss_mib: f64,
    pub rss_peak_mib: f64,
}

/// PostgreSQL's own CPU, or why it was not measured.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PostgresCpu {
    Measured { postmaster_pid: u32, cores: f64 },
    NotMeasured { why: String },
}

#[derive(Debug, Clone, Serialize)]
pub struct RunFigures {
    pub run: usize,
    pub measured_seconds: f64,
    pub heartbeats: CallFigures,
    pub reports: CallFigures,
    /// How late calls were sent after their tick (the load generator's own
    /// lag), over every measured call.
    pub send_lag_ms: Summary,
    pub nodes: Vec<NodeFigures>,
    /// The nodes' CPU together.
    pub web_cpu_cores: f64,
    pub postgres_cpu: Option<PostgresCpu>,
    /// The load generator's own CPU (it shares the machine with web).
    pub load_generator_cpu_cores: f64,
    /// `/proc/loadavg`'s 1-minute figure as the window began and ended.
    pub load_average_start: Option<f64>,
    pub load_average_end: Option<f64>,
    /// Simulated workers whose loop ended in an error.
    pub workers_failed: usize,
    /// Seconds from the fleet's start until every worker had registered
    /// once (`None`: some never did).
    pub all_registered_after_s: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct HeartbeatsReport {
    pub workers: usize,
    pub volumes_per_worker: usize,
    pub web_nodes: usize,
    pub heartbeat_interval_ms: u64,
    pub report_interval_ms: u64,
    pub database: String,
    pub seed_seconds: f64,
    /// How long before the run the seeded volumes were made (0 when the
    /// fleet was reused).
    pub seed_age_seconds: u64,
    pub machine_cores: usize,
    pub web_args: Vec<String>,
    /// Runs asked for (`runs` holds those made).
    pub runs_planned: usize,
    pub runs: Vec<RunFigures>,
    /// The worst heartbeat p99 of all runs.
    pub worst_heartbeat_p99_ms: Option<f64>,
    pub target_p99_ms: Option<f64>,
    /// Whether every run's heartbeat p99 was within the target.
    pub every_run_met_target: Option<bool>,
}

fn join(values: impl Iterator<Item = String>) -> String {
    values.collect::<Vec<_>>().join("/")
}

impl HeartbeatsReport {
    /// One line per run.
    pub fn run_line(&self, r: &RunFigures) -> String {
        let nodes = if self.web_nodes == 1 {
            "1 web node".to_string()
        } else {
            format!("{} web nodes", self.web_nodes)
        };
        let postgres = match &r.postgres_cpu {
            Some(PostgresCpu::Measured { cores, .. }) => format!("; postgres cpu {cores:.2} cores"),
            Some(PostgresCpu::NotMeasured { why }) => {
                format!("; postgres cpu not measured ({why})")
            }
            None => String::new(),
        };
        format!(
            "heartbeats run {}/{}: {} workers x {} volumes ({}, {nodes}; hb every {}ms, report every {}ms, {:.0}s measured): \
             heartbeat p50 {} ms p99 {} ms max {} ms ({} calls of {} due, {} errors); \
             report p50 {} ms p99 {} ms ({} calls of {} due, {} errors); send lag p99 {} ms; \
             web cpu {} cores (total {:.2}), rss {} MiB{postgres}; load generator cpu {:.2} cores; \
             all registered after {} s; load average {} -> {}",
            r.run,
            self.runs_planned.max(r.run),
            self.workers,
            self.volumes_per_worker,
            self.database,
            self.heartbeat_interval_ms,
            self.report_interval_ms,
            r.measured_seconds,
            fmt_opt(r.heartbeats.latency_ms.p50, 2),
            fmt_opt(r.heartbeats.latency_ms.p99, 2),
            fmt_opt(r.heartbeats.latency_ms.max, 2),
            r.heartbeats.count,
            r.heartbeats.due,
            r.heartbeats.errors,
            fmt_opt(r.reports.latency_ms.p50, 2),
            fmt_opt(r.reports.latency_ms.p99, 2),
            r.reports.count,
            r.reports.due,
            r.reports.errors,
            fmt_opt(r.send_lag_ms.p99, 2),
            join(r.nodes.iter().map(|n| format!("{:.2}", n.cpu_cores))),
            r.web_cpu_cores,
            join(r.nodes.iter().map(|n| format!("{:.1}", n.rss_mib))),
            r.load_generator_cpu_cores,
            fmt_opt(r.all_registered_after_s, 1),
            fmt_opt(r.load_average_start, 2),
            fmt_opt(r.load_average_end, 2),
        )
    }

    /// Every run's line, then the summary line.
    pub fn lines(&self) -> String {
        let mut out: String = self.runs.iter().map(|r| self.run_line(r) + "\n").collect();
        out.push_str(&self.summary_line());
        out.push('\n');
        out
    }

    pub fn summary_line(&self) -> String {
        let target = match (self.target_p99_ms, self.every_run_met_target) {
            (Some(t), Some(true)) => format!("; target p99 <= {t} ms: met in every run"),
            (Some(t), _) => {
                let missed: Vec<String> = self
                    .runs
                    .iter()
                    .filter(|r| !meets(r, t))
                    .map(|r| r.run.to_string())
                    .collect();
                format!(
                    "; target p99 <= {t} ms: MISSED in run(s) {}",
                    missed.join(", ")
                )
            }
            (None, _) => String::new(),
        };
        format!(
            "heartbeats summary: {} run(s), worst heartbeat p99 {} ms{target}",
            self.runs.len(),
            fmt_opt(self.worst_heartbeat_p99_ms, 2),
        )
    }

    /// The first run's first node: the figure `agent-memory` prints.
    pub fn first_node(&self) -> Option<&NodeFigures> {
        self.runs.first()?.nodes.first()
    }
}

/// Whether a run's heartbeat p99 is within `target_ms`: a run with no
/// successful heartbeat, with failed calls or with simulated workers that
/// stopped early meets no target.
pub fn meets(run: &RunFigures, target_ms: f64) -> bool {
    run.heartbeats
        .latency_ms
        .p99
        .is_some_and(|p99| p99 <= target_ms)
        && run.heartbeats.errors == 0
        && run.workers_failed == 0
}

/// The worst heartbeat p99 over runs and, with a target, whether every run
/// met it.
pub fn summarise(runs: &[RunFigures], target_ms: Option<f64>) -> (Option<f64>, Option<bool>) {
    let worst = runs
        .iter()
        .filter_map(|r| r.heartbeats.latency_ms.p99)
        .reduce(f64::max);
    let every = target_ms.map(|t| !runs.is_empty() && runs.iter().all(|r| meets(r, t)));
    (worst, every)
}

/// The 1-minute load average from the text of `/proc/loadavg`.
pub(super) fn parse_loadavg(text: &str) -> Option<f64> {
    text.split_whitespace().next()?.parse().ok()
}

pub(super) fn loadavg() -> Option<f64> {
    parse_loadavg(&std::fs::read_to_string("/proc/loadavg").ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(run: usize, p99: Option<f64>, errors: usize) -> RunFigures {
        let latency = Summary {
            p99,
            ..Summary::default()
        };
        let calls = CallFigures {
            count: 10,
            errors,
            due: 10,
            latency_ms: latency,
        };
        RunFigures {
            run,
            measured_seconds: 60.0,
            heartbeats: calls.clone(),
            reports: calls,
            send_lag_ms: Summary::default(),
            nodes: Vec::new(),
            web_cpu_cores: 0.0,
            postgres_cpu: None,
            load_generator_cpu_cores: 0.0,
            load_average_start: None,
            load_average_end: None,
            workers_failed: 0,
            all_registered_after_s: None,
        }
    }

    fn failed_workers(mut r: RunFigures) -> RunFigures {
        r.workers_failed = 7;
        r
    }

    #[test]
    fn the_summary_takes_the_worst_run_and_every_run_must_meet_the_target() {
        type Case = (Vec<RunFigures>, Option<f64>, Option<f64>, Option<bool>);
        let cases: [Case; 6] = [
            (
                vec![run(1, Some(5.0), 0), run(2, Some(9.0), 0)],
                Some(25.0),
                Some(9.0),
                Some(true),
            ),
            (
                vec![run(1, Some(5.0), 0), run(2, Some(30.0), 0)],
                Some(25.0),
                Some(30.0),
                Some(false),
            ),
            // Errors are a miss whatever the latency of the calls that worked.
            (
                vec![run(1, Some(5.0), 3)],
                Some(25.0),
                Some(5.0),
                Some(false),
            ),
            // No heartbeat answered: no p99, and no target met.
            (vec![run(1, None, 0)], Some(25.0), None, Some(false)),
            (vec![run(1, Some(5.0), 0)], None, Some(5.0), None),
            // A run whose workers stopped early measured only part of the fleet.
            (
                vec![failed_workers(run(1, Some(5.0), 0))],
                Some(25.0),
                Some(5.0),
                Some(false),
            ),
        ];
        for (runs, target, worst, every) in cases {
            assert_eq!(summarise(&runs, target), (worst, every));
        }
    }

    #[test]
    fn the_load_average_is_the_first_figure() {
        assert_eq!(parse_loadavg("1.86 0.70 0.25 5/130 7370\n"), Some(1.86));
        assert_eq!(parse_loadavg(""), None);
    }
}
