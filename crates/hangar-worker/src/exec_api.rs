//! `GET /containers/{handle}/exec?process=<ExecRequest as JSON>`, upgraded
//! to a [`hangar_api::intercept`] session: one more process in a running
//! container, its stdin, stdout, stderr (or one pseudo-terminal, resized
//! on request) and its exit carried as frames.
//!
//! The process is the worker's child for the session's length: a client
//! that goes away (its connection closes) ends it, with SIGTERM and, a
//! moment later, SIGKILL.

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, Request, State};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use hangar_api::http::{switching, wants_session};
use hangar_api::intercept::{ExecRequest, Frame, UPGRADE_PROTOCOL};
use hangar_client::intercept::{read_frame, write_frame};
use hyper_util::rt::TokioIo;
use nix::pty::Winsize;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::api::bad_query;
use crate::containers::{ContainerManager, ExecPlan};
use crate::error::{self, ApiError};

type Manager = Arc<ContainerManager>;

/// How long a process whose client went away has after SIGTERM.
const TERM_GRACE: Duration = Duration::from_secs(2);
/// How long output is still read after the process ended.
const DRAIN_GRACE: Duration = Duration::from_secs(1);

pub(crate) fn routes() -> Router<Manager> {
    Router::new().route("/containers/{handle}/exec", get(exec))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExecQuery {
    process: String,
}

async fn exec(
    State(m): State<Manager>,
    Path(handle): Path<String>,
    query: Result<Query<ExecQuery>, QueryRejection>,
    mut req: Request,
) -> Result<Response, ApiError> {
    let Query(q) = query.map_err(bad_query)?;
    let process = ExecRequest::from_query(&q.process).map_err(ApiError::bad_request)?;
    if !wants_session(req.headers()) {
        return Err(ApiError::bad_request(format!(
            "exec is a session: send Connection: upgrade and Upgrade: {UPGRADE_PROTOCOL}"
        )));
    }
    let p = process.clone();
    let plan = match tokio::task::spawn_blocking(move || m.exec_plan(&handle, &p)).await {
        Ok(plan) => plan?,
        Err(e) => return Err(error::panicked("exec", e)),
    };
    let child = spawn(&plan, &process).map_err(|e| {
        ApiError::from(crate::containers::ContainerError::Io {
            context: "start the process".into(),
            source: e,
        })
    })?;
    let upgrade = hyper::upgrade::on(&mut req);
    // The session holds its connection's place under the connection caps.
    let place = hangar_http::ConnectionPlace::of(&req);
    tokio::spawn(async move {
        let _place = place;
        match upgrade.await {
            Ok(upgraded) => run_session(TokioIo::new(upgraded), child, plan).await,
            Err(e) => {
                tracing::debug!(error = %e, "the exec session's upgrade failed");
                child.kill();
            }
        }
    });
    Ok(switching())
}

/// A started process, its ends of its stdio.
struct Child {
    child: tokio::process::Child,
    /// stdin, or the terminal's master side.
    input: Option<Box<dyn AsyncWrite + Send + Unpin>>,
    stdout: Option<Box<dyn AsyncRead + Send + Unpin>>,
    stderr: Option<Box<dyn AsyncRead + Send + Unpin>>,
    /// The terminal's master, to resize it.
    master: Option<OwnedFd>,
}

impl Child {
    fn kill(mut self) {
        let _ = self.child.start_kill();
    }
}

fn winsize(cols: u16, rows: u16) -> Winsize {
    Winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    }
}

/// The plan's argv behind what the session needs first: on a terminal, a
/// session of its own with the terminal as its controlling one (a resize
/// sends it SIGWINCH, the end SIGHUP); then the container's cgroup joined
/// (each by a shell that writes its own pid and `exec`s the next).
fn session_argv(plan: &ExecPlan, tty: bool) -> Vec<OsString> {
    let mut argv: Vec<OsString> = Vec::new();
    if tty {
        argv.extend(["setsid".into(), "--ctty".into()]);
    }
    for procs in &plan.cgroup_procs {
        argv.extend([
            "/bin/sh".into(),
            "-c".into(),
            JOIN_CGROUP.into(),
            procs.into(),
        ]);
    }
    argv.extend(plan.argv.iter().cloned());
    argv
}

/// Writes the shell's pid (`$$`, the program's once it `exec`s) to the
/// cgroup file `$0`.
const JOIN_CGROUP: &str =
    r#"echo $$ > "$0" || { echo "hangar: cannot join the cgroup $0" >&2; exit 125; }; exec "$@""#;

fn spawn(plan: &ExecPlan, req: &ExecRequest) -> std::io::Result<Child> {
    let argv = session_argv(plan, req.tty);
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| std::io::Error::other("nothing to run"))?;
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .env_clear()
        .envs(plan.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&plan.cwd)
        .kill_on_drop(true);
    let tty = req.tty;
    let pty = if tty {
        let size = winsize(req.cols.unwrap_or(80), req.rows.unwrap_or(24));
        let pty = nix::pty::openpty(Some(&size), None)?;
        let slave = std::fs::File::from(pty.slave);
        cmd.stdin(slave.try_clone()?)
            .stdout(slave.try_clone()?)
            .stderr(slave);
        Some(pty.master)
    } else {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        None
    };
    let mut child = cmd.spawn()?;
    // The parent's copies of the slave went with `cmd`'s stdio at spawn.
    drop(cmd);
    Ok(match pty {
        Some(master) => {
            let read = tokio::fs::File::from_std(std::fs::File::from(master.try_clone()?));
            let write = tokio::fs::File::from_std(std::fs::File::from(master.try_clone()?));
            Child {
                child,
                input: Some(Box::new(write)),
                stdout: Some(Box::new(read)),
                stderr: None,
                master: Some(master),
            }
        }
        None => Child {
            input: child.stdin.take().map(|s| Box::new(s) as _),
            stdout: child.stdout.take().map(|s| Box::new(s) as _),
            stderr: child.stderr.take().map(|s| Box::new(s) as _),
            child,
            master: None,
        },
    })
}

/// Pumps a session until the process has ended and all it wrote is sent,
/// or the client has gone (then the process is ended). The plan is
/// finished before the exit goes out: a client that starts its next
/// session at once finds an exited container free again.
async fn run_session<S: AsyncRead + AsyncWrite + Send + 'static>(
    io: S,
    mut child: Child,
    plan: ExecPlan,
) {
    let (mut from_client, mut to_client) = tokio::io::split(io);
    let (out_tx, mut out_rx) = mpsc::channel::<Frame>(16);
    let mut readers = Vec::new();
    for (stream, make) in [
        (child.stdout.take(), Frame::Stdout as fn(Vec<u8>) -> Frame),
        (child.stderr.take(), Frame::Stderr),
    ] {
        let Some(mut stream) = stream else { continue };
        let tx = out_tx.clone();
        readers.push(tokio::spawn(async move {
            let mut buf = vec![0u8; hangar_api::intercept::MAX_FRAME];
            loop {
                match stream.read(&mut buf).await {
                    // A terminal whose every slave closed answers EIO.
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if tx.send(make(buf[..n].to_vec())).await.is_err() {
                            break;
                        }
                    }
                }
            }
        }));
    }
    drop(out_tx);
    // The writer: output as it comes, then the exit.
    let writer = tokio::spawn(async move {
        while let Some(frame) = out_rx.recv().await {
            if write_frame(&mut to_client, &frame).await.is_err() {
                return None;
            }
        }
        Some(to_client)
    });
    let pid = child.child.id();
    let mut input = child.input.take();
    let master = child.master.take();
    let client = async {
        loop {
            match read_frame(&mut from_client).await {
                Ok(Some(Frame::Stdin(bytes))) => {
                    if let Some(i) = input.as_mut() {
                        if i.write_all(&bytes).await.is_err() || i.flush().await.is_err() {
                            input = None;
                        }
                    }
                }
                Ok(Some(Frame::StdinEof)) => {
                    // A terminal has no end of input but the one its
                    // line discipline reads (^D); a pipe closes.
                    if master.is_none() {
                        input = None;
                    }
                }
                Ok(Some(Frame::Resize { cols, rows })) => {
                    if let Some(m) = &master {
                        let _ = rustix::termios::tcsetwinsize(
                            m,
                            rustix::termios::Winsize {
                                ws_row: rows,
                                ws_col: cols,
                                ws_xpixel: 0,
                                ws_ypixel: 0,
                            },
                        );
                    }
                }
                // Only the worker sends the rest: a confused client.
                Ok(Some(other)) => {
                    tracing::debug!(frame = ?other, "a client sent a worker's frame; ending the session");
                    return;
                }
                Ok(None) | Err(_) => return,
            }
        }
    };
    let status = tokio::select! {
        status = child.child.wait() => status,
        () = client => {
            // The client went away: the process goes too.
            if let Some(pid) = pid {
                let _ = kill(Pid::from_raw(-(pid as i32)), Signal::SIGTERM);
                let _ = kill(Pid::from_raw(pid as i32), Signal::SIGTERM);
            }
            match tokio::time::timeout(TERM_GRACE, child.child.wait()).await {
                Ok(status) => status,
                Err(_) => {
                    let _ = child.child.start_kill();
                    child.child.wait().await
                }
            }
        }
    };
    // What the process wrote before it ended is still to be read; a
    // child it left behind holding the output open must not hold the
    // session, so the readers get a moment, not forever.
    let drained = async {
        for r in &mut readers {
            let _ = r.await;
        }
    };
    if tokio::time::timeout(DRAIN_GRACE, drained).await.is_err() {
        for r in &readers {
            r.abort();
        }
    }
    if let Err(e) = tokio::task::spawn_blocking(move || plan.finish()).await {
        tracing::warn!(error = %e, "finishing an exec session's plan failed");
    }
    let Ok(Some(mut to_client)) = writer.await else {
        return;
    };
    let last = match status {
        Ok(s) => Frame::Exit(s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0))),
        Err(e) => Frame::Error(format!("cannot wait for the process: {e}")),
    };
    let _ = write_frame(&mut to_client, &last).await;
    let _ = to_client.shutdown().await;
}
