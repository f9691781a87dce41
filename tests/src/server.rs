//! Servers the tests start themselves (memcached, etcd), on free ports, that
//! never outlive the test process.
//!
//! Like the Redis harness, each server runs under a small `sh` watchdog
//! whose standard input is a pipe from the test process: when the test
//! process ends, however it ends (even `SIGKILL`), the pipe closes and the
//! watchdog kills the server and removes its directory.

use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

/// Starts `"$@"` in the background, prints its pid, waits for its standard
/// input to close, then kills it and removes the directory `$1`.
const WATCHDOG: &str = r#"
dir="$1"; shift
"$@" >"$dir/server.log" 2>&1 &
pid=$!
echo "$pid"
cat >/dev/null
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
rm -rf "$dir"
"#;

/// A server process started by a test.
pub struct Server {
    /// The port it listens on.
    pub port: u16,
    dir: PathBuf,
    program: String,
    args: Vec<String>,
    /// Set in the environment of every start, restarts included (the
    /// watchdog's shell gets it too, and does nothing with it).
    env: Vec<(String, String)>,
    watchdog: Option<(Child, ChildStdin)>,
}

impl Server {
    /// Starts `program` with `args` (where `{port}` and `{dir}` are replaced
    /// by a free port and a fresh directory, and `{peer}` by that port plus
    /// 10000, also free), and waits until `ready(port)` says it answers.
    pub fn start(
        program: &str,
        args: &[&str],
        ready: impl Fn(u16) -> io::Result<()>,
    ) -> io::Result<Server> {
        Self::start_with_env(program, args, &[], ready)
    }

    /// As [`start`](Server::start), with `env` added to the server's
    /// environment, at this start and every [`restart`](Server::restart)
    /// (a [`ServerClock`](crate::server_clock::ServerClock)'s, say).
    pub fn start_with_env(
        program: &str,
        args: &[&str],
        env: &[(String, String)],
        ready: impl Fn(u16) -> io::Result<()>,
    ) -> io::Result<Server> {
        let mut last = io::Error::other("no attempt made");
        for _ in 0..5 {
            let port = crate::harness::free_port()?;
            match Self::start_at_with_env(port, program, args, env, &ready) {
                Ok(server) => return Ok(server),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// As [`start`](Server::start), on `port` (the caller chose it, as the
    /// members of a cluster must know each other's ports up front).
    pub fn start_at(
        port: u16,
        program: &str,
        args: &[&str],
        ready: impl Fn(u16) -> io::Result<()>,
    ) -> io::Result<Server> {
        Self::start_at_with_env(port, program, args, &[], ready)
    }

    /// As [`start_at`](Server::start_at), with `env` added to the server's
    /// environment, as [`start_with_env`](Server::start_with_env) does.
    pub fn start_at_with_env(
        port: u16,
        program: &str,
        args: &[&str],
        env: &[(String, String)],
        ready: impl Fn(u16) -> io::Result<()>,
    ) -> io::Result<Server> {
        let unique: u64 = rand::random();
        let dir = std::env::temp_dir().join(format!(
            "lock-tests-{program}-{}-{port}-{unique:016x}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir)?;
        let mut server = Server {
            port,
            dir,
            program: program.to_owned(),
            args: args.iter().map(|arg| (*arg).to_owned()).collect(),
            env: env.to_vec(),
            watchdog: None,
        };
        server.launch(&ready)?;
        Ok(server)
    }

    fn launch(&mut self, ready: &dyn Fn(u16) -> io::Result<()>) -> io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let port = self.port.to_string();
        let dir = self.dir.to_string_lossy().into_owned();
        let args: Vec<String> = self
            .args
            .iter()
            .map(|arg| {
                arg.replace("{port}", &port)
                    .replace("{peer}", &(self.port + 10_000).to_string())
                    .replace("{dir}", &dir)
            })
            .collect();
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(WATCHDOG)
            .arg("sh")
            .arg(&self.dir)
            .arg(&self.program)
            .args(&args)
            .envs(self.env.iter().map(|(name, value)| (name, value)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| io::Error::other("no stdin"))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| io::Error::other("no stdout"))?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        self.watchdog = Some((child, stdin));
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match ready(self.port) {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() >= deadline => {
                    let log =
                        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
                    self.stop();
                    return Err(io::Error::other(format!(
                        "{} on port {} did not answer: {e}; log:\n{log}",
                        self.program, self.port
                    )));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    /// Its directory, removed when it stops: a place for files that must
    /// live as long as it does.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Kills the server with `SIGKILL` and waits until it is gone; the port
    /// is kept for [`restart`](Server::restart).
    pub fn kill(&mut self) {
        self.stop();
    }

    /// Starts the server again on the same port, with nothing in it (and
    /// the environment it was started with).
    pub fn restart(&mut self, ready: impl Fn(u16) -> io::Result<()>) -> io::Result<()> {
        self.stop();
        self.launch(&ready)
    }

    fn stop(&mut self) {
        if let Some((mut child, stdin)) = self.watchdog.take() {
            drop(stdin);
            let _ = child.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Whether `program --version` runs.
pub fn installed(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// Sends `signal` (`-STOP`, `-CONT`) to the process `pid`.
pub fn signal(pid: u32, signal: &str) -> io::Result<()> {
    let status = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!("kill {signal} {pid}: {status}")))
    }
}
