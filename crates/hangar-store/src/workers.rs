use hangar_core::fencing::{check_generation, Refusal};
use hangar_core::lifecycle::{apply_command, plan_gone, plan_lifecycle};
use hangar_core::registration::{
    classify_registration, registration_cause, KnownWorker, RegistrationKind,
};
use hangar_core::{
    EventKind, LifecycleAction, LifecycleConfig, LifecycleStep, OperatorCommand, UnixMillis,
    WorkerSnapshot, WorkerState,
};
use sqlx::{Any, Row, Transaction};

use crate::containers::invalidate_worker_containers;
use crate::db::{Backend, Store};
use crate::error::StoreError;
use crate::events::record_event;
use crate::records::{parse_state, worker_from_row, WorkerInfo, WorkerRecord, WORKER_COLUMNS};
use crate::volumes::invalidate_worker_volumes;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisterOutcome {
    pub generation: i64,
    pub kind: RegistrationKind,
    /// What web knew of the name before, if anything.
    pub previous: Option<KnownWorker>,
    /// Volume rows of the old state dropped with a `state-lost` registration.
    pub invalidated_volumes: u64,
    /// Container rows of the old state dropped with it.
    pub invalidated_containers: u64,
}

/// The credentials of one registration, as web keeps them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Credentials<'a> {
    /// The digest of the secret part of the incarnation token.
    pub token_hash: &'a str,
    /// The token web presents to the worker's own API (stored sealed with
    /// the store's [`WorkerTokenKey`](crate::WorkerTokenKey)).
    pub api_token: Option<&'a str>,
}

/// Whom a registration expects to replace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Whatever holds the name.
    Anything,
    /// Only this holder: the generation of the row (`None`: no row).
    Incumbent(Option<i64>),
}

/// One registration, with everything the store records of it.
#[derive(Debug, Clone, Copy)]
pub struct Registration<'a> {
    pub info: &'a WorkerInfo,
    /// How the previous container ended, for the event's cause.
    pub previous_exit: Option<&'a str>,
    pub credentials: Option<Credentials<'a>>,
    pub expect: Expect,
    /// The highest generation the worker says it was ever given; the new
    /// generation is above it.
    pub generation_floor: i64,
    /// Whether a `generation_floor` this database never issued is adopted
    /// (the operator accepted a new database) or refused.
    pub accept_unissued_generation: bool,
}

/// The holder of a name as a registration finds it: enough to decide
/// whether it may be taken over, and to call it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncumbentRecord {
    pub state: WorkerState,
    pub generation: i64,
    pub last_heartbeat_at: UnixMillis,
    pub api_url: Option<String>,
    /// The holder's API token, opened. `None` also when the stored value
    /// does not open with this store's key (logged): web cannot ask such a
    /// holder whether it is alive, so it keeps its name until its
    /// heartbeats lapse.
    pub api_token: Option<String>,
}

/// What authenticates a worker process's call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerCredential {
    pub generation: i64,
    pub token_hash: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandOutcome {
    /// The state after the command; `None` when the worker was removed.
    pub state: Option<WorkerState>,
    pub changed: bool,
}

fn select_workers_sql(filter: &str) -> String {
    format!(
        "SELECT {WORKER_COLUMNS}, e.id AS event_id, e.kind AS event_kind, e.cause AS event_cause, \
         e.generation AS event_generation, e.at AS event_at, \
         r.id AS restart_id, r.kind AS restart_kind, r.cause AS restart_cause, \
         r.generation AS restart_generation, r.at AS restart_at \
         FROM workers w LEFT JOIN worker_events e \
         ON e.id = (SELECT MAX(x.id) FROM worker_events x WHERE x.worker = w.name) \
         LEFT JOIN worker_events r ON r.id = (SELECT MAX(y.id) FROM worker_events y \
         WHERE y.worker = w.name AND y.kind IN ('restarted-state-kept', 'restarted-state-lost')) \
         {filter} ORDER BY w.name"
    )
}

impl Store {
    /// Registers a worker process and returns its new generation. Whatever the
    /// name held before is replaced in the same transaction, and the event
    /// saying what kind of registration it was is recorded with it.
    pub async fn register_worker(
        &self,
        info: &WorkerInfo,
        now: UnixMillis,
    ) -> Result<RegisterOutcome, StoreError> {
        self.register_worker_reporting(info, None, now).await
    }

    /// [`Store::register_worker`], with how the worker's previous container
    /// ended (as the worker tells it) added to the registration event's cause.
    pub async fn register_worker_reporting(
        &self,
        info: &WorkerInfo,
        previous_exit: Option<&str>,
        now: UnixMillis,
    ) -> Result<RegisterOutcome, StoreError> {
        self.register_incarnation(
            &Registration {
                info,
                previous_exit,
                credentials: None,
                expect: Expect::Anything,
                generation_floor: 0,
                accept_unissued_generation: false,
            },
            now,
        )
        .await
    }

    /// Registers one incarnation of a worker: its credentials are stored
    /// with the row, and the registration is refused with
    /// [`StoreError::Conflict`] if the name's holder is no longer the one
    /// the caller decided about (`expect`).
    pub async fn register_incarnation(
        &self,
        reg: &Registration<'_>,
        now: UnixMillis,
    ) -> Result<RegisterOutcome, StoreError> {
        let info = reg.info;
        // Sealed before the row is locked: only the sealed value is written.
        let api_token = reg
            .credentials
            .and_then(|c| c.api_token)
            .map(|t| self.seal_api_token(&info.name, t))
            .transpose()?;
        let (mut tx, generation, previous) = match self.backend() {
            Backend::Sqlite => self.take_generation_sqlite(reg).await?,
            Backend::Postgres => self.take_generation_postgres(reg).await?,
        };

        if let Expect::Incumbent(expected) = reg.expect {
            if previous.as_ref().map(|p| p.generation) != expected {
                return Err(StoreError::Conflict(format!(
                    "worker {} changed while its registration was checked; try again",
                    info.name
                )));
            }
        }
        let kind = classify_registration(previous.as_ref(), &info.state_identity);
        let tags = serde_json::to_string(&info.tags)
            .map_err(|e| StoreError::Corrupt(format!("tags: {e}")))?;
        let running = WorkerState::Running.as_str();
        let query = if previous.is_some() {
            sqlx::query(
                "UPDATE workers SET state = $2, state_identity = $3, generation = $4, platform = $5, \
                 tags = $6, team = $7, version = $8, resource_types = $9, ephemeral = $10, \
                 containers = $11, volumes = $12, registered_at = $13, last_heartbeat_at = $13, \
                 state_changed_at = $13, restarts = restarts + 1, api_url = $14, token_hash = $15, \
                 api_token = $16, allow_privileged = $17 WHERE name = $1",
            )
        } else {
            sqlx::query(
                "INSERT INTO workers (name, state, state_identity, generation, platform, tags, team, \
                 version, resource_types, ephemeral, containers, volumes, first_registered_at, \
                 registered_at, last_heartbeat_at, state_changed_at, restarts, api_url, token_hash, \
                 api_token, allow_privileged) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $13, $13, $13, 0, $14, \
                 $15, $16, $17)",
            )
        };
        query
            .bind(&info.name)
            .bind(running)
            .bind(&info.state_identity)
            .bind(generation)
            .bind(&info.platform)
            .bind(&tags)
            .bind(&info.team)
            .bind(&info.version)
            .bind(&info.resource_types_json)
            .bind(i64::from(info.ephemeral))
            .bind(info.containers)
            .bind(info.volumes)
            .bind(now)
            .bind(&info.api_url)
            .bind(reg.credentials.map(|c| c.token_hash))
            .bind(api_token)
            .bind(i64::from(info.allow_privileged))
            .execute(&mut *tx)
            .await
            .map_err(|e| match e {
                // Two first registrations of one name at once (PostgreSQL:
                // there was no row to lock): the later one waits for the
                // earlier to commit and then finds the name taken.
                sqlx::Error::Database(d) if d.is_unique_violation() => {
                    StoreError::Conflict(format!(
                        "worker {} registered from elsewhere at the same time; try again",
                        info.name
                    ))
                }
                e => StoreError::from(e),
            })?;

        // The old state is gone from the worker's disk: every row of it is
        // false from this instant, so it goes in this same transaction.
        let (invalidated_volumes, invalidated_containers) = if kind == RegistrationKind::StateLost {
            (
                invalidate_worker_volumes(&mut tx, self.backend(), &info.name).await?,
                invalidate_worker_containers(&mut tx, &info.name).await?,
            )
        } else {
            (0, 0)
        };
        let mut cause = registration_cause(previous.as_ref(), kind, generation);
        if kind == RegistrationKind::StateLost {
            cause.push_str(&format!(
                "; invalidated {invalidated_volumes} volume(s) and {invalidated_containers} container(s)"
            ));
        }
        if let Some(exit) = reg.previous_exit {
            cause.push_str(&format!("; previous container ended: {exit}"));
        }
        record_event(&mut tx, &info.name, kind.event(), &cause, generation, now).await?;
        tx.commit().await?;
        Ok(RegisterOutcome {
            generation,
            kind,
            previous,
            invalidated_volumes,
            invalidated_containers,
        })
    }

    /// Records a heartbeat from `generation` of the worker, or says why it is
    /// refused. The accepted path is one statement: this runs for every worker
    /// every few seconds.
    pub async fn heartbeat(
        &self,
        name: &str,
        generation: i64,
        containers: i64,
        volumes: i64,
        now: UnixMillis,
    ) -> Result<WorkerState, StoreError> {
        self.heartbeat_with_condition(name, generation, containers, volumes, None, now)
            .await
    }

    /// A heartbeat that also records the worker's view of its condition
    /// (JSON; `None` clears it).
    pub async fn heartbeat_with_condition(
        &self,
        name: &str,
        generation: i64,
        containers: i64,
        volumes: i64,
        condition: Option<&str>,
        now: UnixMillis,
    ) -> Result<WorkerState, StoreError> {
        let accepted = sqlx::query(
            "UPDATE workers SET last_heartbeat_at = $1, containers = $2, volumes = $3, condition = $6 \
             WHERE name = $4 AND generation = $5 AND state <> 'stalled' RETURNING state",
        )
        .bind(now)
        .bind(containers)
        .bind(volumes)
        .bind(name)
        .bind(generation)
        .bind(condition)
        .fetch_optional(&self.pool)
        .await?;
        if let Some(row) = accepted {
            return parse_state(&row);
        }
        let row = self.state_and_generation(name).await?;
        match check_generation(row, generation) {
            // The row changed between the two statements (a registration
            // landed in between); the caller may simply try again.
            Ok(()) => Err(StoreError::Conflict(format!(
                "worker {name} changed during the heartbeat; try again"
            ))),
            Err(refusal) => Err(refused(name, generation, refusal)),
        }
    }

    /// Checks that `generation` is the current registration of `name` and
    /// not stalled: every message a worker process sends goes through this.
    pub async fn check_worker_generation(
        &self,
        name: &str,
        generation: i64,
    ) -> Result<(), StoreError> {
        let row = self.state_and_generation(name).await?;
        check_generation(row, generation).map_err(|r| refused(name, generation, r))
    }

    /// The current holder of `name`, for a registration to decide on.
    pub async fn worker_incumbent(
        &self,
        name: &str,
    ) -> Result<Option<IncumbentRecord>, StoreError> {
        sqlx::query(
            "SELECT state, generation, last_heartbeat_at, api_url, api_token FROM workers WHERE name = $1",
        )
        .bind(name)
        .fetch_optional(&self.pool)
        .await?
        .map(|row| -> Result<_, StoreError> {
            let api_token = match self.open_api_token(name, row.try_get("api_token")?) {
                Ok(token) => token,
                Err(e) => {
                    tracing::warn!(worker = %name, error = %e, "the holder's API token cannot be read: it is not probed");
                    None
                }
            };
            Ok(IncumbentRecord {
                state: parse_state(&row)?,
                generation: row.try_get("generation")?,
                last_heartbeat_at: row.try_get("last_heartbeat_at")?,
                api_url: row.try_get("api_url")?,
                api_token,
            })
        })
        .transpose()
    }

    /// What a call from a process of `name` is checked against.
    pub async fn worker_credential(
        &self,
        name: &str,
    ) -> Result<Option<WorkerCredential>, StoreError> {
        sqlx::query("SELECT generation, token_hash FROM workers WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?
            .map(|row| -> Result<_, StoreError> {
                Ok(WorkerCredential {
                    generation: row.try_get("generation")?,
                    token_hash: row.try_get("token_hash")?,
                })
            })
            .transpose()
    }

    /// The token web presents to `name`'s API (opened), with the URL it
    /// serves at. A stored token that does not open is
    /// [`StoreError::Sealed`]: nothing is ever presented in its place.
    pub async fn worker_api_endpoint(
        &self,
        name: &str,
    ) -> Result<Option<(Option<String>, Option<String>)>, StoreError> {
        sqlx::query("SELECT api_url, api_token FROM workers WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?
            .map(|row| -> Result<_, StoreError> {
                Ok((
                    row.try_get("api_url")?,
                    self.open_api_token(name, row.try_get("api_token")?)?,
                ))
            })
            .transpose()
    }

    /// Records that a registration under `name` was refused because the
    /// holder still answers; the holder's row is left as it was.
    pub async fn record_takeover_refused(
        &self,
        name: &str,
        generation: i64,
        cause: &str,
        now: UnixMillis,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        record_event(
            &mut tx,
            name,
            EventKind::TakeoverRefused,
            cause,
            generation,
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn state_and_generation(
        &self,
        name: &str,
    ) -> Result<Option<(WorkerState, i64)>, StoreError> {
        sqlx::query("SELECT state, generation FROM workers WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?
            .map(|row| -> Result<_, StoreError> {
                Ok((parse_state(&row)?, row.try_get::<i64, _>("generation")?))
            })
            .transpose()
    }

    /// Lands, retires or prunes a worker. `by` names who asked, for the event.
    pub async fn worker_command(
        &self,
        name: &str,
        command: OperatorCommand,
        by: &str,
        now: UnixMillis,
    ) -> Result<CommandOutcome, StoreError> {
        let mut tx = self.pool.begin().await?;
        let row = sqlx::query("SELECT state, generation FROM workers WHERE name = $1")
            .bind(name)
            .fetch_optional(&mut *tx)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("worker {name} not found")))?;
        let state = parse_state(&row)?;
        let generation: i64 = row.try_get("generation")?;
        let decision = apply_command(state, command).map_err(|why| {
            StoreError::Conflict(format!("cannot {} worker {name}: {why}", command.as_str()))
        })?;
        let Some((step, event)) = decision else {
            return Ok(CommandOutcome {
                state: Some(state),
                changed: false,
            });
        };
        let applied = apply_step(&mut tx, name, state, generation, None, step, now).await?;
        if !applied {
            return Err(StoreError::Conflict(format!(
                "worker {name} changed while it was being asked to {}; try again",
                command.as_str()
            )));
        }
        let cause = format!("{} requested by {by} (was {state})", command.as_str());
        record_event(&mut tx, name, event, &cause, generation, now).await?;
        tx.commit().await?;
        Ok(CommandOutcome {
            state: match step {
                LifecycleStep::Become(s) => Some(s),
                LifecycleStep::Remove => None,
            },
            changed: true,
        })
    }

    /// Prunes every stalled worker; returns the names removed.
    pub async fn prune_stalled(
        &self,
        by: &str,
        now: UnixMillis,
    ) -> Result<Vec<String>, StoreError> {
        let names: Vec<String> =
            sqlx::query("SELECT name FROM workers WHERE state = 'stalled' ORDER BY name")
                .fetch_all(&self.pool)
                .await?
                .iter()
                .map(|row| row.try_get("name"))
                .collect::<Result<_, _>>()?;
        let mut pruned = Vec::with_capacity(names.len());
        for name in names {
            match self
                .worker_command(&name, OperatorCommand::Prune, by, now)
                .await
            {
                Ok(_) => pruned.push(name),
                // Gone or registered again since the listing: not ours to prune.
                Err(StoreError::NotFound(_) | StoreError::Conflict(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(pruned)
    }

    /// Runs one pass of the lifecycle loop at `now` and returns what it did.
    /// Each action is applied in its own transaction and only if the worker is
    /// still as the plan saw it, so concurrent passes (several web nodes)
    /// apply each change once.
    pub async fn run_lifecycle(
        &self,
        config: &LifecycleConfig,
        now: UnixMillis,
    ) -> Result<Vec<LifecycleAction>, StoreError> {
        let snapshot = self.lifecycle_snapshot().await?;
        let mut applied = Vec::new();
        for action in plan_lifecycle(&snapshot, now, config) {
            let mut tx = self.pool.begin().await?;
            let done = apply_step(
                &mut tx,
                &action.name,
                action.from,
                action.generation,
                Some(action.seen_heartbeat_at),
                action.step,
                now,
            )
            .await?;
            if done {
                record_event(
                    &mut tx,
                    &action.name,
                    action.event,
                    &action.cause,
                    action.generation,
                    now,
                )
                .await?;
                tx.commit().await?;
                applied.push(action);
            }
        }
        Ok(applied)
    }

    /// Settles `name` at once because its process is gone (its connection
    /// to web closed without a goodbye and its API refused a probe): the
    /// change the TTL would make (`hangar_core::lifecycle::plan_gone`),
    /// applied only if the row is still the registration `generation` and
    /// as the plan saw it, so a registration or a heartbeat that lands
    /// meanwhile wins. Returns what was done.
    pub async fn settle_gone_worker(
        &self,
        name: &str,
        generation: i64,
        why: &str,
        now: UnixMillis,
    ) -> Result<Option<LifecycleAction>, StoreError> {
        let row = sqlx::query(&format!("{SNAPSHOT_SQL} WHERE name = $1"))
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let snapshot = snapshot_from_row(&row)?;
        if snapshot.generation != generation {
            return Ok(None);
        }
        let Some(action) = plan_gone(&snapshot, why) else {
            return Ok(None);
        };
        let mut tx = self.pool.begin().await?;
        let done = apply_step(
            &mut tx,
            &action.name,
            action.from,
            action.generation,
            Some(action.seen_heartbeat_at),
            action.step,
            now,
        )
        .await?;
        if !done {
            return Ok(None);
        }
        record_event(
            &mut tx,
            &action.name,
            action.event,
            &action.cause,
            action.generation,
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(Some(action))
    }

    async fn lifecycle_snapshot(&self) -> Result<Vec<WorkerSnapshot>, StoreError> {
        let rows = sqlx::query(SNAPSHOT_SQL).fetch_all(&self.pool).await?;
        rows.iter().map(snapshot_from_row).collect()
    }

    pub async fn list_workers(&self) -> Result<Vec<WorkerRecord>, StoreError> {
        let rows = sqlx::query(&select_workers_sql(""))
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(worker_from_row).collect()
    }

    pub async fn get_worker(&self, name: &str) -> Result<Option<WorkerRecord>, StoreError> {
        sqlx::query(&select_workers_sql("WHERE w.name = $1"))
            .bind(name)
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(worker_from_row)
            .transpose()
    }
}

/// What the lifecycle planner reads of every worker.
const SNAPSHOT_SQL: &str =
    "SELECT name, state, generation, ephemeral, last_heartbeat_at, state_changed_at, containers \
     FROM workers";

fn snapshot_from_row(row: &sqlx::any::AnyRow) -> Result<WorkerSnapshot, StoreError> {
    Ok(WorkerSnapshot {
        name: row.try_get("name")?,
        state: parse_state(row)?,
        generation: row.try_get("generation")?,
        ephemeral: row.try_get::<i64, _>("ephemeral")? != 0,
        last_heartbeat_at: row.try_get("last_heartbeat_at")?,
        state_changed_at: row.try_get("state_changed_at")?,
        unfinished_work: row.try_get("containers")?,
    })
}

fn refused(name: &str, generation: i64, refusal: Refusal) -> StoreError {
    StoreError::Refused {
        message: refusal.message(name, generation),
        refusal,
    }
}

/// Applies one lifecycle step if the row is still in `from` at `generation`
/// (and, when given, still has the heartbeat the planner saw). Returns whether
/// it applied.
async fn apply_step(
    tx: &mut Transaction<'_, Any>,
    name: &str,
    from: WorkerState,
    generation: i64,
    seen_heartbeat_at: Option<UnixMillis>,
    step: LifecycleStep,
    now: UnixMillis,
) -> Result<bool, StoreError> {
    // The guard's placeholders follow the step's own: `$n` is the first free one.
    let guard = |n: usize| {
        let mut g = format!(
            "name = ${n} AND state = ${} AND generation = ${}",
            n + 1,
            n + 2
        );
        if seen_heartbeat_at.is_some() {
            g.push_str(&format!(" AND last_heartbeat_at = ${}", n + 3));
        }
        g
    };
    let (sql, head) = match step {
        LifecycleStep::Become(to) => (
            format!(
                "UPDATE workers SET state = $1, state_changed_at = $2 WHERE {}",
                guard(3)
            ),
            Some(to),
        ),
        LifecycleStep::Remove => (format!("DELETE FROM workers WHERE {}", guard(1)), None),
    };
    let mut query = sqlx::query(&sql);
    if let Some(to) = head {
        query = query.bind(to.as_str()).bind(now);
    }
    query = query.bind(name).bind(from.as_str()).bind(generation);
    if let Some(seen) = seen_heartbeat_at {
        query = query.bind(seen);
    }
    let result = query.execute(&mut **tx).await?;
    Ok(result.rows_affected() == 1)
}
