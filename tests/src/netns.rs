//! Network namespaces, so that every byte a process sends crosses the
//! harness's proxies, whatever address it dials.
//!
//! A [`Proxy`](crate::proxy::Proxy) started with
//! [`Proxy::start`](crate::proxy::Proxy::start) listens on a port of its
//! own, and only clients told that port go through it. A Redis Cluster or
//! Sentinel client is not told where to connect: it asks the servers, and
//! they announce `127.0.0.1:<their own port>`. Without a namespace such a
//! client dials the servers directly, past any proxy, and a fault injected
//! on its traffic never reaches it:
//!
//! ```text
//! worker --(seed, through the proxy)--> node A : "slot 42 is on 127.0.0.1:7001"
//! worker --(straight to 7001, no proxy)--> node B   <- a stall never touches this
//! ```
//!
//! A process started in a [`Netns`] has a loopback of its own, on which
//! nothing listens but what the harness puts there. The harness listens,
//! inside the namespace, on `127.0.0.1:<P>` for every server port `P` the
//! process may dial, with a proxy whose upstream is the host's
//! `127.0.0.1:<P>` ([`Proxy::start_in`](crate::proxy::Proxy::start_in)).
//! The process dials the very addresses the servers announce, and each of
//! its connections is one of the proxies' connections.
//!
//! No virtual link joins the namespace to the host: the listening socket is
//! created inside the namespace by a short-lived thread that entered it
//! ([`Netns::bind`]), and the proxy dials upstream from the host namespace,
//! on the test's runtime. A socket stays in the namespace it was created
//! in, whichever thread uses it afterwards.
//!
//! # Limits
//!
//! - Linux only, and root only (creating a namespace needs
//!   `CAP_SYS_ADMIN`); `ip` (iproute2) must be on `PATH`.
//!   [`Netns::available`] says whether this process can, and tests skip
//!   when it cannot.
//! - A process in the namespace reaches only the ports the harness
//!   listens on, and only on the addresses it listens on: a client that
//!   dials `[::1]:<P>` while the proxy listens on `127.0.0.1:<P>` is
//!   refused.
//! - A namespace outlives a harness killed with `SIGKILL` (its `Drop` never
//!   runs). The next [`Netns::create`] removes those whose creator is no
//!   longer running, by their names (`lock-tests-<pid>-<n>`); one whose
//!   pid has been reused by an unrelated process stays until that process
//!   ends.

use std::ffi::OsStr;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// Where `ip netns add` mounts each namespace, by name (iproute2's
/// `NETNS_RUN_DIR`).
const RUN_DIR: &str = "/var/run/netns";

/// The start of every namespace name this crate makes; the creator's pid
/// and a counter follow (`lock-tests-1234-0`).
const PREFIX: &str = "lock-tests-";

/// A network namespace of the harness's own, with its loopback up and
/// nothing listening in it. Deleted on drop.
///
/// ```no_run
/// # async fn example() -> std::io::Result<()> {
/// use lock_tests::netns::Netns;
/// use lock_tests::proxy::Proxy;
///
/// let netns = Netns::create()?;
/// // Inside, 127.0.0.1:6379 is a proxy in front of the host's 127.0.0.1:6379.
/// let proxy = Proxy::start_in(&netns, "127.0.0.1:6379".parse().unwrap(), "127.0.0.1:6379").await?;
/// let mut ping = netns.command("redis-cli");
/// ping.args(["-p", "6379", "ping"]);
/// assert!(ping.status()?.success());
/// proxy.stall(); // now that command would hang
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
#[must_use = "the namespace is deleted when dropped"]
pub struct Netns {
    name: String,
    path: PathBuf,
}

impl Netns {
    /// Whether this process can create network namespaces, enter them and
    /// start programs in them: asked once (a trial namespace is made and
    /// deleted), then remembered.
    pub fn available() -> bool {
        Self::unavailable_reason().is_none()
    }

    /// Why [`available`](Netns::available) is false, for a test's skip
    /// notice; `None` when it is true.
    pub fn unavailable_reason() -> Option<&'static str> {
        static CHECKED: OnceLock<Result<(), String>> = OnceLock::new();
        CHECKED
            .get_or_init(trial)
            .as_ref()
            .err()
            .map(String::as_str)
    }

    /// Creates a namespace named `lock-tests-<pid>-<n>` and brings its
    /// loopback up. First removes the namespaces that earlier harness
    /// processes, no longer running, left behind.
    pub fn create() -> io::Result<Netns> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        remove_stale();
        let name = format!(
            "{PREFIX}{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        ip(&["netns", "add", &name])?;
        // From here on, dropping it deletes it, however the rest goes.
        let netns = Netns {
            path: Path::new(RUN_DIR).join(&name),
            name,
        };
        ip(&["-n", &netns.name, "link", "set", "lo", "up"])?;
        Ok(netns)
    }

    /// The namespace's name, as `ip netns` knows it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where the namespace is mounted (`/var/run/netns/<name>`): opened,
    /// it is the namespace, as `/proc/<pid>/ns/net` is a process's.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A listener on `addr` inside the namespace (`127.0.0.1:6379`: the
    /// namespace's own loopback, where nothing else listens), nonblocking,
    /// ready for `tokio::net::TcpListener::from_std`.
    ///
    /// The socket is made by a short-lived thread that enters the
    /// namespace; the calling thread stays where it is.
    pub fn bind(&self, addr: SocketAddr) -> io::Result<TcpListener> {
        self.inside(move || {
            let listener = TcpListener::bind(addr)?;
            listener.set_nonblocking(true)?;
            Ok(listener)
        })
        .map_err(|e| io::Error::new(e.kind(), format!("listening on {addr} in {}: {e}", self)))
    }

    /// A blocking connection to `addr` made from inside the namespace: what
    /// a process in it would reach there.
    pub fn connect(&self, addr: SocketAddr) -> io::Result<TcpStream> {
        self.inside(move || TcpStream::connect(addr))
            .map_err(|e| io::Error::new(e.kind(), format!("connecting to {addr} in {}: {e}", self)))
    }

    /// A command that runs `program` inside the namespace, through `ip
    /// netns exec`; add its arguments and standard streams as usual.
    ///
    /// `ip netns exec` enters the namespace and then replaces itself with
    /// `program` (`execvp`, no fork), so the spawned child's
    /// [`id`](std::process::Child::id) is `program`'s own pid: a signal
    /// sent there (`SIGSTOP`, `SIGKILL`) reaches the program itself, and
    /// its pipes are the program's. The test
    /// `a_program_started_in_a_namespace_has_the_childs_pid` holds it to
    /// that.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.name]).arg(program);
        command
    }

    /// Runs `work` on a new thread that has entered the namespace, and
    /// returns what it made. Only that thread moves, and it ends with
    /// `work`.
    fn inside<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> io::Result<T> + Send + 'static,
    ) -> io::Result<T> {
        let path = self.path.clone();
        std::thread::Builder::new()
            .name(format!("netns {}", self.name))
            .spawn(move || {
                enter(&path)?;
                work()
            })?
            .join()
            .map_err(|_| io::Error::other("the thread inside the namespace panicked"))?
    }
}

impl std::fmt::Display for Netns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "network namespace {}", self.name)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Processes still running inside keep the namespace itself alive
        // until they end; its name goes now.
        if let Err(e) = ip(&["netns", "del", &self.name]) {
            eprintln!("deleting {self}: {e}");
        }
    }
}

/// Moves the calling thread into the network namespace mounted at `path`.
#[cfg(target_os = "linux")]
fn enter(path: &Path) -> io::Result<()> {
    use std::os::fd::AsFd;
    let file = std::fs::File::open(path)?;
    rustix::thread::move_into_link_name_space(
        file.as_fd(),
        Some(rustix::thread::LinkNameSpaceType::Network),
    )?;
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn enter(_: &Path) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "network namespaces are Linux-only",
    ))
}

/// Whether this process can use namespaces: `Err` says why not.
fn trial() -> Result<(), String> {
    if !cfg!(target_os = "linux") {
        return Err("network namespaces are Linux-only".to_owned());
    }
    let version = Command::new("ip")
        .arg("-V")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !version.is_ok_and(|status| status.success()) {
        return Err("`ip` (iproute2) is not on PATH: apt-get install iproute2".to_owned());
    }
    if !is_root() {
        return Err(
            "not running as root: creating a network namespace needs CAP_SYS_ADMIN".to_owned(),
        );
    }
    let netns = Netns::create().map_err(|e| format!("a trial namespace: {e}"))?;
    netns
        .bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .map_err(|e| format!("a trial namespace: {e}"))?;
    let ran = netns
        .command("true")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("running `ip netns exec`: {e}"))?;
    if !ran.status.success() {
        return Err(format!(
            "`ip netns exec {} true` failed ({}): {}",
            netns.name,
            ran.status,
            String::from_utf8_lossy(&ran.stderr).trim()
        ));
    }
    Ok(())
}

#[cfg(target_os = "linux")]
fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

#[cfg(not(target_os = "linux"))]
fn is_root() -> bool {
    false
}

/// Deletes the namespaces named for a harness process that is no longer
/// running. Best effort: another harness may be deleting the same ones.
fn remove_stale() {
    let Ok(entries) = std::fs::read_dir(RUN_DIR) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(pid) = creator(name) else { continue };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = ip(&["netns", "del", name]);
        }
    }
}

/// The pid in a name this crate made (`lock-tests-<pid>-<n>`).
fn creator(name: &str) -> Option<u32> {
    let (pid, n) = name.strip_prefix(PREFIX)?.split_once('-')?;
    n.parse::<u64>().ok()?;
    pid.parse().ok()
}

/// Runs `ip` with `args`; an error carries what `ip` said.
fn ip(args: &[&str]) -> io::Result<()> {
    let shown = args.join(" ");
    let output = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| io::Error::new(e.kind(), format!("running `ip {shown}`: {e}")))?;
    if output.status.success() {
        return Ok(());
    }
    Err(io::Error::other(format!(
        "`ip {shown}` failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_names_of_the_scheme_name_a_creator() {
        assert_eq!(creator("lock-tests-1234-0"), Some(1234));
        assert_eq!(creator("lock-tests-1234-17"), Some(1234));
        assert_eq!(creator("lock-tests-1234"), None, "no counter");
        assert_eq!(creator("lock-tests-x-0"), None, "no pid");
        assert_eq!(creator("other-1234-0"), None, "someone else's");
        assert_eq!(creator("lock-tests-1234-0-extra"), None, "not ours");
    }
}
