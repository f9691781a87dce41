//! Network namespaces on real servers: a Redis Cluster client in a
//! namespace reaches every node through the harness's proxies, the ones in
//! front of the very addresses the nodes announce, and their faults reach
//! it; a program started in a namespace is the child whose pid the harness
//! signals.
//!
//! Without the namespace, a cluster client follows a `MOVED` redirect to
//! `127.0.0.1:<node port>` straight past the proxy it was given, and a
//! stall "injected" on its traffic changes nothing: a fault run would
//! report a fault that never happened.
//!
//! Time bounds are hang guards, except the one that says a stalled command
//! has not finished: a second is ample for a local `GET`.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use lock_tests::harness::{self, RedisCluster};
use lock_tests::netns::Netns;
use lock_tests::proxy::Proxy;

/// Hang guard for what should happen promptly.
const GUARD: Duration = Duration::from_secs(20);

/// How long a command cut off by a stall is watched not finishing.
const STALLED_FOR: Duration = Duration::from_secs(1);

fn blocking<T>(step: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(step)
}

/// Whether this process can make namespaces; if not, says so loudly (a
/// failure under `CI=true`).
fn namespaces(what: &str) -> bool {
    match Netns::unavailable_reason() {
        None => true,
        Some(why) => {
            harness::unavailable::<()>(what, why);
            false
        }
    }
}

/// A child killed and reaped however the test ends.
struct Running(Child);

impl Running {
    fn spawn(command: &mut Command) -> Running {
        Running(command.spawn().expect("spawn in the namespace"))
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }

    /// Its exit status, once it ends within `within`; `None` while it runs.
    fn ended(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.0.try_wait().expect("try_wait") {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits (hang guard) for it to end and returns what it printed, both
    /// streams; its output is small enough for the pipes' buffers.
    fn finish(mut self, what: &str) -> (ExitStatus, String) {
        let status = self
            .ended(GUARD)
            .unwrap_or_else(|| panic!("{what} still running after {GUARD:?}"));
        let mut printed = String::new();
        if let Some(mut stdout) = self.0.stdout.take() {
            stdout.read_to_string(&mut printed).expect("read stdout");
        }
        if let Some(mut stderr) = self.0.stderr.take() {
            stderr.read_to_string(&mut printed).expect("read stderr");
        }
        (status, printed)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `redis-cli <args>` inside `netns`, started.
fn redis_cli(netns: &Netns, args: &[&str]) -> Running {
    Running::spawn(
        netns
            .command("redis-cli")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
}

/// `redis-cli <args>` inside `netns`, run to its end: its reply, which
/// must have succeeded.
fn redis_cli_ok(netns: &Netns, args: &[&str]) -> String {
    let (status, printed) = redis_cli(netns, args).finish("redis-cli");
    assert!(
        status.success(),
        "redis-cli {args:?} in the namespace: {status}: {printed}"
    );
    printed.trim().to_owned()
}

/// The port in a `redis://127.0.0.1:<port>` URL.
fn port_of(url: &str) -> u16 {
    url.rsplit(':')
        .next()
        .and_then(|port| port.parse().ok())
        .unwrap_or_else(|| panic!("no port in {url}"))
}

/// A cluster client (`redis-cli -c`) in a namespace with a proxy on each
/// node's own port: its writes and reads land on every node, the
/// redirected ones included, each proxy counting connections; a stall on
/// the proxies holds a command until `resume`, which completes it; a cut
/// ends a subscriber's connection. Before the proxies exist the namespace
/// reaches no node at all: nothing in it can go around them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_client_in_a_namespace_reaches_every_node_through_its_proxies_and_meets_their_faults()
 {
    let what = "the Redis Cluster client in a network namespace test";
    if !harness::redis_server_installed() {
        harness::unavailable::<()>(what, "redis-server is not on PATH");
        return;
    }
    if !namespaces(what) {
        return;
    }
    let cluster =
        blocking(|| RedisCluster::start(3)).expect("a cluster of three primaries, no replicas");
    let ports: Vec<u16> = cluster.urls().iter().map(|url| port_of(url)).collect();
    let seed = ports[0].to_string();
    let netns = Netns::create().expect("a namespace");

    // Nothing listens in the namespace yet: the nodes are out of reach.
    let (status, printed) =
        blocking(|| redis_cli(&netns, &["-p", &seed, "ping"]).finish("redis-cli ping"));
    assert!(
        !status.success() || !printed.contains("PONG"),
        "with no proxy, a node is out of reach from the namespace: {status}: {printed}"
    );

    let mut proxies = Vec::new();
    for &port in &ports {
        let listen = SocketAddr::from(([127, 0, 0, 1], port));
        let proxy = Proxy::start_in(&netns, listen, &format!("127.0.0.1:{port}"))
            .await
            .unwrap_or_else(|e| panic!("a proxy on {port} in the namespace: {e}"));
        proxies.push(proxy);
    }

    // Every command starts at the seed node; the keys' slots are spread
    // over all three, so the other nodes are reached only by following
    // `MOVED` to the address a node announced.
    let keys: Vec<String> = (0..12).map(|n| format!("netns:{n}")).collect();
    blocking(|| {
        for key in &keys {
            let reply = redis_cli_ok(&netns, &["-c", "-p", &seed, "set", key, key]);
            assert_eq!(reply, "OK", "SET {key} through the proxies");
        }
        for key in &keys {
            let reply = redis_cli_ok(&netns, &["-c", "-p", &seed, "get", key]);
            assert_eq!(&reply, key, "GET {key} through the proxies");
        }
    });
    for (proxy, port) in proxies.iter().zip(&ports) {
        assert!(
            proxy.connections() > 0,
            "node {port} was reached through its proxy: the keys' slots cover every node, \
             and a client that went around the proxy would not be counted"
        );
    }

    // Stalled: the command cannot complete, however long it waits; resumed:
    // the held bytes are delivered and the same command completes.
    for proxy in &proxies {
        proxy.stall();
    }
    let key = &keys[0];
    let mut stalled = redis_cli(&netns, &["-c", "-p", &seed, "get", key]);
    let early = blocking(|| stalled.ended(STALLED_FOR));
    assert!(
        early.is_none(),
        "GET cannot complete while the proxies stall: it ended {early:?}"
    );
    for proxy in &proxies {
        proxy.resume();
    }
    let (status, printed) = blocking(|| stalled.finish("the stalled GET, resumed"));
    assert!(
        status.success() && printed.trim() == key,
        "once resumed, the held GET completes with the value: {status}: {printed}"
    );

    // A subscriber keeps its connection open until the proxies cut it.
    let before = proxies[0].connections();
    let mut subscriber = redis_cli(&netns, &["-p", &seed, "subscribe", "netns"]);
    blocking(|| {
        let deadline = Instant::now() + GUARD;
        while proxies[0].connections() == before {
            assert!(Instant::now() < deadline, "the subscriber connected");
            std::thread::sleep(Duration::from_millis(10));
        }
    });
    let early = blocking(|| subscriber.ended(STALLED_FOR));
    assert!(
        early.is_none(),
        "a subscriber stays connected until cut: it ended {early:?}"
    );
    for proxy in &proxies {
        proxy.cut_all();
    }
    let (status, printed) = blocking(|| subscriber.finish("the subscriber, cut"));
    assert!(
        !status.success() && printed.contains("Server closed the connection"),
        "the cut closed the subscriber's connection: {status}: {printed}"
    );
}

/// The fields of `/proc/<pid>/stat` after the command name: state first,
/// then the parent's pid.
fn stat(pid: u32) -> Vec<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/stat: {e}"));
    let (_, after) = stat
        .rsplit_once(')')
        .expect("a command name in parentheses");
    after.split_whitespace().map(str::to_owned).collect()
}

fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|comm| comm.trim().to_owned())
        .unwrap_or_default()
}

/// Waits (hang guard) until `done` holds.
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + GUARD;
    while !done() {
        assert!(Instant::now() < deadline, "{what}, within {GUARD:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn kill(signal: &str, pid: u32) {
    let status = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {signal} {pid}: {status}");
}

/// A program started through [`Netns::command`] runs in the namespace
/// under the spawned child's own pid (`ip netns exec` replaces itself with
/// it): `SIGSTOP` there stops the program, `SIGCONT` continues it, `SIGKILL`
/// ends it, and its standard streams are the pipes the harness gave it.
/// The fault harness pauses and kills workers by that pid; were it the pid
/// of a wrapper, the worker would run on through a "pause".
#[test]
fn a_program_started_in_a_namespace_has_the_childs_pid() {
    if !namespaces("the network namespace process test") {
        return;
    }
    let netns = Netns::create().expect("a namespace");
    let mut sleeper = Running::spawn(
        netns
            .command("sleep")
            .arg("600")
            .stdin(Stdio::null())
            .stdout(Stdio::null()),
    );
    let pid = sleeper.pid();
    // The child starts as `ip` and becomes `sleep` at its exec.
    eventually("the child's pid runs sleep", || comm(pid) == "sleep");
    assert_eq!(
        stat(pid)[1],
        std::process::id().to_string(),
        "sleep is this process's own child, not a grandchild"
    );
    let inside = std::fs::read_link(format!("/proc/{pid}/ns/net")).expect("its namespace");
    let named = std::fs::metadata(netns.path())
        .expect("the namespace's mount")
        .ino();
    assert_eq!(
        inside.to_string_lossy(),
        format!("net:[{named}]"),
        "sleep runs in the namespace"
    );

    kill("-STOP", pid);
    eventually("SIGSTOP stops it (state T)", || stat(pid)[0] == "T");
    kill("-CONT", pid);
    eventually("SIGCONT continues it", || stat(pid)[0] != "T");
    kill("-KILL", pid);
    let status = sleeper.ended(GUARD).expect("SIGKILL ends it");
    assert_eq!(status.signal(), Some(9), "ended by SIGKILL: {status}");

    // Its standard input and output are the harness's pipes.
    let mut cat = netns
        .command("cat")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn cat in the namespace");
    cat.stdin
        .take()
        .expect("piped stdin")
        .write_all(b"through the pipes\n")
        .expect("write to cat");
    let Output { status, stdout, .. } = cat.wait_with_output().expect("cat's output");
    assert!(status.success(), "cat: {status}");
    assert_eq!(
        String::from_utf8_lossy(&stdout),
        "through the pipes\n",
        "what was written to its stdin comes back on its stdout"
    );
}

/// Runs `ip <args>`, which must succeed.
fn ip(args: &[&str]) {
    let output = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run ip");
    assert!(
        output.status.success(),
        "ip {args:?}: {}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A harness killed with `SIGKILL` never deletes its namespaces; the next
/// one to create a namespace deletes them, and only them: one whose creator
/// still runs is left alone. Without this every killed fault run would
/// leave namespaces behind for good.
#[test]
fn namespaces_left_by_a_harness_that_is_gone_are_removed_at_the_next_create() {
    if !namespaces("the stale network namespace test") {
        return;
    }
    let mut gone = Command::new("true").spawn().expect("spawn true");
    let gone_pid = gone.id();
    gone.wait().expect("true ends");
    let running = Running::spawn(Command::new("sleep").arg("600").stdin(Stdio::null()));
    let stale = format!("lock-tests-{gone_pid}-0");
    let live = format!("lock-tests-{}-0", running.pid());
    ip(&["netns", "add", &stale]);
    ip(&["netns", "add", &live]);

    let netns = Netns::create().expect("a namespace");
    let runs = netns.path().parent().expect("where namespaces are mounted");
    let stale_left = runs.join(&stale).exists();
    let live_left = runs.join(&live).exists();
    // Best effort: were it deleted by the create, the assertion says so.
    let _ = Command::new("ip").args(["netns", "del", &live]).output();
    assert!(
        !stale_left,
        "{stale}, whose creator {gone_pid} is gone, is deleted"
    );
    assert!(live_left, "{live}, whose creator still runs, is kept");
    assert!(
        runs.join(netns.name()).exists(),
        "the new one is there: {}",
        netns.path().display()
    );
    drop(netns);
}
