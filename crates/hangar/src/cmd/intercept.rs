//! `intercept` (fly's `hijack`, `i`): a command, or a shell on a terminal,
//! in a step's running container; and `containers`, the team's containers.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use anyhow::{bail, Context};
use hangar_api::intercept::{ExecRequest, Frame, TeamContainer};
use hangar_client::intercept::{read_frame, write_frame};

use super::pipelines::{split_flag, TeamArgs};
use crate::format::{ago, now_ms, table};

#[derive(clap::Args, Debug)]
pub(crate) struct ContainersArgs {
    #[command(flatten)]
    pub team: TeamArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `containers`: the team's containers, oldest first.
pub(crate) async fn containers(args: ContainersArgs) -> anyhow::Result<ExitCode> {
    let team = args.team.name()?;
    let list = args.team.target.client()?.containers(&team).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(ExitCode::SUCCESS);
    }
    print!("{}", listing(&list, now_ms()));
    Ok(ExitCode::SUCCESS)
}

fn listing(list: &[TeamContainer], now: i64) -> String {
    let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|c| {
            vec![
                c.handle.clone(),
                c.worker.clone(),
                dash(&c.pipeline),
                dash(&c.job),
                c.build_name.clone(),
                c.build_id.to_string(),
                dash(&c.step_type),
                dash(&c.step),
                c.attempt.map_or("-".into(), |a| a.to_string()),
                state(c, now),
                ago(now, c.created_at),
            ]
        })
        .collect();
    table(
        &[
            "handle", "worker", "pipeline", "job", "build #", "build id", "type", "name",
            "attempt", "state", "created",
        ],
        &rows,
    )
}

/// The row's state, or for a failed step's kept container how long it
/// stays.
fn state(c: &TeamContainer, now: i64) -> String {
    match c.kept_until {
        Some(until) if c.state == "created" => {
            format!("exited, kept {}", in_time(until.saturating_sub(now)))
        }
        _ => c.state.clone(),
    }
}

/// `ms` from now, roughly: `for 23h`, `for 4m`, `a moment more`.
fn in_time(ms: i64) -> String {
    let s = ms / 1000;
    match s {
        ..=0 => "a moment more".into(),
        1..=59 => format!("for {s}s"),
        60..=3599 => format!("for {}m", s / 60),
        _ => format!("for {}h", s / 3600),
    }
}

#[derive(clap::Args, Debug)]
pub(crate) struct InterceptArgs {
    #[command(flatten)]
    pub team: TeamArgs,
    /// The job: PIPELINE/JOB.
    #[arg(short = 'j', long = "job")]
    pub job: Option<String>,
    /// The build: its number within the job (with -j), else its id.
    #[arg(short = 'b', long = "build")]
    pub build: Option<String>,
    /// The step's name (a task's name).
    #[arg(short = 's', long = "step")]
    pub step: Option<String>,
    /// The step's type (only `task` steps run in containers here).
    #[arg(long = "step-type")]
    pub step_type: Option<String>,
    /// The step's attempt (its retry).
    #[arg(short = 'a', long = "attempt")]
    pub attempt: Option<i64>,
    /// The container's handle (see `hangar containers`).
    #[arg(long = "handle")]
    pub handle: Option<String>,
    /// The command to run (default: bash, or sh where the image has no
    /// bash).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<String>,
}

/// Which containers a user's flags select.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Selector {
    pipeline_job: Option<(String, String)>,
    build: Option<String>,
    step: Option<String>,
    step_type: Option<String>,
    attempt: Option<i64>,
    handle: Option<String>,
}

impl Selector {
    fn matches(&self, c: &TeamContainer) -> bool {
        let eq = |want: &Option<String>, have: &Option<String>| {
            want.as_ref().is_none_or(|w| have.as_ref() == Some(w))
        };
        if let Some((p, j)) = &self.pipeline_job {
            if c.pipeline.as_ref() != Some(p) || c.job.as_ref() != Some(j) {
                return false;
            }
        }
        if let Some(b) = &self.build {
            // Within a job, its build number; alone, the build's id.
            let hit = if self.pipeline_job.is_some() {
                c.build_name == *b
            } else {
                c.build_id.to_string() == *b
            };
            if !hit {
                return false;
            }
        }
        self.handle.as_ref().is_none_or(|h| c.handle == *h)
            && eq(&self.step, &c.step)
            && eq(&self.step_type, &c.step_type)
            && self.attempt.is_none_or(|a| c.attempt == Some(a))
    }
}

/// The containers of `list` the selector takes, and only running or kept
/// ones (`created`): nothing can run in the others.
fn select<'a>(list: &'a [TeamContainer], s: &Selector) -> Vec<&'a TeamContainer> {
    list.iter()
        .filter(|c| c.state == "created" && s.matches(c))
        .collect()
}

fn describe(c: &TeamContainer) -> String {
    let mut parts = Vec::new();
    if let (Some(p), Some(j)) = (&c.pipeline, &c.job) {
        parts.push(format!("{p}/{j} #{}", c.build_name));
    } else {
        parts.push(format!("build {}", c.build_id));
    }
    if let Some(s) = &c.step {
        parts.push(format!(
            "{} {s}",
            c.step_type.clone().unwrap_or_else(|| "step".into())
        ));
    }
    if let Some(a) = c.attempt.filter(|a| *a > 1) {
        parts.push(format!("attempt {a}"));
    }
    parts.push(format!("on {}", c.worker));
    if c.kept_until.is_some() {
        parts.push("exited (kept after the failure)".into());
    }
    parts.join(", ")
}

/// The request for the user's command; none: bash where the image has it.
fn request(command: &[String], tty: Option<(u16, u16)>) -> ExecRequest {
    let (path, args) = match command.split_first() {
        Some((path, args)) => (path.clone(), args.to_vec()),
        None => (
            "/bin/sh".to_string(),
            vec![
                "-c".into(),
                "if command -v bash >/dev/null 2>&1; then exec bash; fi; exec sh".into(),
            ],
        ),
    };
    ExecRequest {
        path,
        args,
        tty: tty.is_some(),
        cols: tty.map(|t| t.0),
        rows: tty.map(|t| t.1),
    }
}

pub(crate) async fn intercept(args: InterceptArgs) -> anyhow::Result<ExitCode> {
    let selector = Selector {
        pipeline_job: args
            .job
            .as_deref()
            .map(|j| split_flag("job", j))
            .transpose()?,
        build: args.build.clone(),
        step: args.step.clone(),
        step_type: args.step_type.clone(),
        attempt: args.attempt,
        handle: args.handle.clone(),
    };
    let team = args.team.name()?;
    let client = args.team.target.client()?;
    let list = client.containers(&team).await?;
    let chosen = select(&list, &selector);
    let container = match chosen.as_slice() {
        [] => {
            bail!("no running or kept container matches (team {team}; `hangar containers` lists them all)")
        }
        [one] => *one,
        many => choose(many).await?,
    };
    let terminal = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
    let size = terminal.then(terminal_size);
    let req = request(&args.command, size);
    req.check().map_err(anyhow::Error::msg)?;
    let session = client
        .intercept(&team, &container.handle, &req)
        .await
        .with_context(|| format!("cannot intercept {}", describe(container)))?;
    let raw = if terminal {
        Some(RawMode::enter()?)
    } else {
        None
    };
    let code = run(session, terminal).await;
    drop(raw);
    let code = code?;
    // The reader of standard input may sit in a blocking read: leave
    // without waiting for it.
    std::io::stdout().flush().ok();
    std::process::exit(code);
}

/// Asks which of several containers to enter, as fly does.
async fn choose<'a>(many: &[&'a TeamContainer]) -> anyhow::Result<&'a TeamContainer> {
    let names: Vec<String> = many
        .iter()
        .enumerate()
        .map(|(i, c)| format!("{}: {}", i + 1, describe(c)))
        .collect();
    if !std::io::stdin().is_terminal() {
        bail!(
            "several containers match; narrow it down (-j, -b, -s, -a, --handle):\n{}",
            names.join("\n")
        );
    }
    for n in &names {
        println!("{n}");
    }
    loop {
        print!("choose a container: ");
        std::io::stdout().flush()?;
        let line = tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).map(|n| (n, line))
        })
        .await??;
        if line.0 == 0 {
            bail!("no container chosen");
        }
        match line.1.trim().parse::<usize>() {
            Ok(n) if (1..=many.len()).contains(&n) => return Ok(many[n - 1]),
            _ => println!("a number from 1 to {}", many.len()),
        }
    }
}

/// The local terminal's size: columns and rows.
fn terminal_size() -> (u16, u16) {
    rustix::termios::tcgetwinsize(std::io::stdout())
        .ok()
        .filter(|w| w.ws_col > 0 && w.ws_row > 0)
        .map_or((80, 24), |w| (w.ws_col, w.ws_row))
}

/// The local terminal in raw mode while a session runs on it: keys go to
/// the container's terminal as typed (^C too), and come back as it echoes.
struct RawMode(nix::sys::termios::Termios);

impl RawMode {
    fn enter() -> anyhow::Result<RawMode> {
        use nix::sys::termios::{cfmakeraw, tcgetattr, tcsetattr, SetArg};
        let stdin = std::io::stdin();
        let saved = tcgetattr(&stdin).context("read the terminal's mode")?;
        let mut raw = saved.clone();
        cfmakeraw(&mut raw);
        tcsetattr(&stdin, SetArg::TCSANOW, &raw).context("set the terminal raw")?;
        Ok(RawMode(saved))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = nix::sys::termios::tcsetattr(
            std::io::stdin(),
            nix::sys::termios::SetArg::TCSANOW,
            &self.0,
        );
    }
}

/// Pumps the session: standard input (and, on a terminal, its resizes) to
/// the container, its output here; answers the process's exit status.
async fn run(session: hangar_client::intercept::Session, terminal: bool) -> anyhow::Result<i32> {
    let (mut from, mut to) = tokio::io::split(session);
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Frame>(16);
    let stdin_tx = tx.clone();
    // A thread of its own: a read of standard input blocks until the user
    // types, and the process leaves without waiting for it.
    std::thread::spawn(move || {
        use std::io::Read;
        let mut stdin = std::io::stdin().lock();
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match stdin.read(&mut buf) {
                Ok(0) | Err(_) => {
                    let _ = stdin_tx.blocking_send(Frame::StdinEof);
                    return;
                }
                Ok(n) => {
                    if stdin_tx
                        .blocking_send(Frame::Stdin(buf[..n].to_vec()))
                        .is_err()
                    {
                        return;
                    }
                }
            }
        }
    });
    if terminal {
        let resize_tx = tx.clone();
        tokio::spawn(async move {
            use tokio::signal::unix::{signal, SignalKind};
            let Ok(mut winch) = signal(SignalKind::window_change()) else {
                return;
            };
            while winch.recv().await.is_some() {
                let (cols, rows) = terminal_size();
                if resize_tx.send(Frame::Resize { cols, rows }).await.is_err() {
                    return;
                }
            }
        });
    }
    drop(tx);
    tokio::spawn(async move {
        while let Some(frame) = rx.recv().await {
            if write_frame(&mut to, &frame).await.is_err() {
                return;
            }
        }
    });
    let mut stdout = std::io::stdout();
    let mut stderr = std::io::stderr();
    loop {
        match read_frame(&mut from).await.context("the session broke")? {
            Some(Frame::Stdout(b)) => {
                stdout.write_all(&b)?;
                stdout.flush()?;
            }
            Some(Frame::Stderr(b)) => {
                stderr.write_all(&b)?;
                stderr.flush()?;
            }
            Some(Frame::Exit(code)) => return Ok(code),
            Some(Frame::Error(m)) => bail!("{m}"),
            Some(other) => bail!("the worker sent a client's frame: {other:?}"),
            None => bail!("the session ended before the process did"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(handle: &str, job: Option<(&str, &str)>, build: (i64, &str), step: &str) -> TeamContainer {
        TeamContainer {
            handle: handle.into(),
            worker: "w1".into(),
            state: "created".into(),
            build_id: build.0,
            build_name: build.1.into(),
            pipeline: job.map(|j| j.0.into()),
            job: job.map(|j| j.1.into()),
            step: Some(step.into()),
            step_type: Some("task".into()),
            attempt: Some(1),
            created_at: 0,
            kept_until: None,
        }
    }

    #[test]
    fn flags_select_containers_as_fly_s_do() {
        let mut gone = c("h5", Some(("p", "unit")), (12, "3"), "test");
        gone.state = "destroying".into();
        let mut retried = c("h6", Some(("p", "unit")), (12, "3"), "test");
        retried.attempt = Some(2);
        // A failed step's container, kept: it can be entered.
        let mut kept = c("h7", Some(("p", "unit")), (9, "0"), "test");
        kept.kept_until = Some(1);
        let list = vec![
            c("h1", Some(("p", "unit")), (10, "1"), "test"),
            c("h2", Some(("p", "unit")), (11, "2"), "test"),
            c("h3", Some(("p", "lint")), (11, "2"), "lint"),
            c("h4", None, (2, "2"), "test"),
            gone,
            retried,
            kept,
        ];
        let job = |p: &str, j: &str| Some((p.to_string(), j.to_string()));
        let handles = |s: Selector| -> Vec<String> {
            select(&list, &s).iter().map(|c| c.handle.clone()).collect()
        };
        let cases: Vec<(Selector, Vec<&str>)> = vec![
            (
                Selector::default(),
                vec!["h1", "h2", "h3", "h4", "h6", "h7"],
            ),
            (
                Selector {
                    pipeline_job: job("p", "unit"),
                    ..Default::default()
                },
                vec!["h1", "h2", "h6", "h7"],
            ),
            // Within a job, -b is the build's number.
            (
                Selector {
                    pipeline_job: job("p", "unit"),
                    build: Some("2".into()),
                    ..Default::default()
                },
                vec!["h2"],
            ),
            // Alone, -b is the build's id: the one-off build 2 is not
            // build id 2's job build.
            (
                Selector {
                    build: Some("2".into()),
                    ..Default::default()
                },
                vec!["h4"],
            ),
            (
                Selector {
                    build: Some("11".into()),
                    step: Some("lint".into()),
                    ..Default::default()
                },
                vec!["h3"],
            ),
            (
                Selector {
                    attempt: Some(2),
                    ..Default::default()
                },
                vec!["h6"],
            ),
            (
                Selector {
                    step_type: Some("get".into()),
                    ..Default::default()
                },
                vec![],
            ),
            // A container being destroyed is never chosen, even by handle.
            (
                Selector {
                    handle: Some("h5".into()),
                    ..Default::default()
                },
                vec![],
            ),
            (
                Selector {
                    handle: Some("h4".into()),
                    ..Default::default()
                },
                vec!["h4"],
            ),
        ];
        for (selector, want) in cases {
            assert_eq!(handles(selector.clone()), want, "{selector:?}");
        }
    }

    #[test]
    fn the_default_command_is_bash_where_there_is_one() {
        let r = request(&[], Some((120, 40)));
        assert_eq!(r.path, "/bin/sh");
        assert!(r.args[1].contains("exec bash") && r.args[1].ends_with("exec sh"));
        assert_eq!((r.tty, r.cols, r.rows), (true, Some(120), Some(40)));
        let r = request(&["ls".into(), "-la".into()], None);
        assert_eq!(
            (r.path.as_str(), r.args.as_slice()),
            ("ls", &["-la".to_string()][..])
        );
        assert_eq!((r.tty, r.cols), (false, None));
        assert_eq!(r.check(), Ok(()));
    }

    #[test]
    fn a_listing_reads_as_fly_s() {
        let list = vec![c("h1", Some(("p", "unit")), (10, "1"), "test")];
        let out = listing(&list, 5_000);
        let mut lines = out.lines();
        assert!(lines
            .next()
            .unwrap()
            .starts_with("handle  worker  pipeline  job"));
        let row = lines.next().unwrap();
        for cell in [
            "h1", "w1", "p", "unit", "10", "task", "test", "created", "5s ago",
        ] {
            assert!(row.contains(cell), "{cell} in {row}");
        }
        let mut kept = c("h2", None, (3, "one-off"), "test");
        kept.kept_until = Some(5_000 + 2 * 3600 * 1000 + 5);
        let out = listing(&[kept.clone()], 5_000);
        assert!(out.contains("exited, kept for 2h"), "{out}");
        assert!(describe(&kept).ends_with("exited (kept after the failure)"));
        assert_eq!(in_time(0), "a moment more");
        assert_eq!(in_time(59_999), "for 59s");
        assert_eq!(in_time(60_000), "for 1m");
    }
}
