//! A wall clock the fault harness can move, for the store's servers.
//!
//! A lease held in Redis ends when the server's own wall clock says so:
//! `SET key token PX 3000` stores an absolute expiry time, read from the
//! server's clock. A server whose clock jumps forward (an NTP step, a VM
//! restored from a snapshot) drops the key early, while its holder still
//! believes the lock is its own:
//!
//! ```text
//! t=0     A: SET lock a PX 3000          the server notes: expires at t+3 s
//! t=1     the server's clock jumps 20 s  (A's lease has 2 s to go, by A's clock)
//! t=1     B: SET lock b NX PX 3000       the key has expired: B holds the lock
//! t=1-3   A and B both believe they hold it; only fencing tells them apart
//! ```
//!
//! [`ServerClock`] lets a test play that: servers started with its
//! [`env`](ServerClock::env) read a wall clock moved by the offset that
//! [`set`](ServerClock::set) writes, at once and as often as wanted, while
//! they run. It is a small C library preloaded into the server
//! (`LD_PRELOAD`, Linux only; the source is `server_clock.c`), built with
//! the machine's C compiler when a clock is made. It replaces
//! `clock_gettime`, `gettimeofday` and `time`, and moves `CLOCK_REALTIME`
//! and `CLOCK_REALTIME_COARSE` only: monotonic clocks keep the real pace,
//! and with them whatever a server times by them (Redis's timer events,
//! memcached's expiry). libfaketime does more, but hangs Debian's
//! `redis-server`, which is linked with jemalloc ("Unexpected recursive
//! calls to clock_gettime()").
//!
//! What the stores make of a moved wall clock (seen with Redis 7.0,
//! memcached 1.6 and etcd 3.4; the tests below check Redis's expiry and
//! memcached's immunity):
//!
//! - Redis (a single server, the data nodes of a cluster or of a Sentinel
//!   group) expires keys by it, at once: `TIME` and a script's
//!   `redis.call('TIME')` move with it, a key set with `PX 10000` is gone
//!   20 s ahead, and one set while the clock is ahead lives that much
//!   longer once it is set back. Timeouts of blocking commands (`BLPOP`,
//!   `WAIT`) run on it too: a jump ahead ends them early, a jump back
//!   stretches them by the jump. The server keeps answering throughout.
//!   Move every data node together: a replica answers reads by its own
//!   clock. A cluster whose nodes jump together (20 s, or an hour, either
//!   way) stays `cluster_state:ok` with no failover; a jump ahead past
//!   `repl-timeout` (60 s) can make a primary drop its replica, which
//!   resyncs (partially) at once.
//! - memcached is immune: it reads the wall clock once, at start, and
//!   counts on its monotonic clock from there. A running server's items
//!   expire on time whatever the offset; only one (re)started after a move
//!   reports the moved `time` in `stats`.
//! - etcd, and any program written in Go, is immune: Go reads the clock
//!   from the kernel's vDSO, never through the C library, so the
//!   preloaded functions are never called (its leases and logs keep the
//!   real time).
//!
//! Keep the clock alive as long as the servers started with it: its
//! directory, with the library and the control file, goes when it is
//! dropped, and a server restarted after that starts without the library
//! (the loader only warns).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::kept::KeptDir;

/// The library's C source.
const SOURCE: &str = include_str!("server_clock.c");

/// The environment variable that names the control file, in the server's
/// environment (`CONTROL_VARIABLE` in `server_clock.c`).
pub const CONTROL_VARIABLE: &str = "LOCK_TESTS_SERVER_CLOCK";

/// How far [`ServerClock::new`] moves the clock of a `date` it runs to
/// see that the library works: a day, so that the answer cannot be the
/// real clock read a little late.
const PROBE_OFFSET_MS: i64 = 86_400_000;

/// A wall-clock offset for the servers started with its
/// [`env`](ServerClock::env); see the [module docs](self).
///
/// ```no_run
/// use lock_tests::harness::RedisServer;
/// use lock_tests::server_clock::ServerClock;
///
/// let clock = ServerClock::new()?;
/// let Some(server) = RedisServer::start_with_env(&[], &clock.env()) else {
///     return Ok(()); // no redis-server: skipped, after a loud notice
/// };
/// // The server's wall clock is now 20 s ahead: a key set with PX 10000
/// // before this line is gone.
/// clock.set(20_000)?;
/// clock.set(0)?;
/// # drop(server);
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct ServerClock {
    library: PathBuf,
    control: PathBuf,
    /// The control file, open for writing: [`set`](ServerClock::set)
    /// rewrites it in place, where the servers have it mapped.
    file: File,
    /// Removed on drop, or when the test process ends however it ends.
    _dir: KeptDir,
}

impl ServerClock {
    /// Builds the library (with `$CC`, or `cc`) into a fresh temporary
    /// directory, next to a control file holding offset 0, and checks that
    /// a program run under it (`date`) sees its clock moved.
    ///
    /// Fails, saying what is missing, without a C compiler, on a system
    /// other than Linux, or where the library cannot be preloaded (a
    /// temporary directory mounted `noexec`, say).
    pub fn new() -> io::Result<ServerClock> {
        if !cfg!(target_os = "linux") {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "moving a server's clock needs Linux: the library is preloaded \
                 with LD_PRELOAD and reads the clock with Linux system calls",
            ));
        }
        let unique: u64 = rand::random();
        let dir = std::env::temp_dir().join(format!(
            "lock-tests-clock-{}-{unique:016x}",
            std::process::id()
        ));
        // LD_PRELOAD splits its value at spaces and colons.
        if dir.to_string_lossy().contains([' ', ':']) {
            return Err(io::Error::other(format!(
                "the temporary directory {} has a space or a colon in its path, which \
                 LD_PRELOAD cannot carry; set TMPDIR to another directory",
                dir.display()
            )));
        }
        let kept = KeptDir::new(dir.clone())?;
        let source = dir.join("server_clock.c");
        let library = dir.join("server_clock.so");
        std::fs::write(&source, SOURCE)?;
        compile(&source, &library)?;
        let control = dir.join("offset");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&control)
            .map_err(|e| {
                io::Error::new(e.kind(), format!("creating {}: {e}", control.display()))
            })?;
        let clock = ServerClock {
            library,
            control,
            file,
            _dir: kept,
        };
        clock.set(0)?;
        clock.probe()?;
        Ok(clock)
    }

    /// The environment a server needs to run on this clock: `LD_PRELOAD`
    /// (the library) and [`CONTROL_VARIABLE`] (the control file). For
    /// [`RedisServer::start_with_env`](crate::harness::RedisServer::start_with_env)
    /// and the other `*_with_env` starts.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            (
                "LD_PRELOAD".to_owned(),
                self.library.to_string_lossy().into_owned(),
            ),
            (
                CONTROL_VARIABLE.to_owned(),
                self.control.to_string_lossy().into_owned(),
            ),
        ]
    }

    /// Moves the wall clock of every server on this clock to the real time
    /// plus `offset_ms` milliseconds (negative: behind), from their next
    /// clock read on. `set(0)` puts it back.
    pub fn set(&self, offset_ms: i64) -> io::Result<()> {
        self.file.write_all_at(&record(offset_ms), 0).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("writing the offset to {}: {e}", self.control.display()),
            )
        })
    }

    /// Runs `date +%s` on this clock, a day ahead, and fails unless it
    /// answers a day ahead: a library the loader could not preload would
    /// otherwise leave every clock fault without effect, silently.
    fn probe(&self) -> io::Result<()> {
        self.set(PROBE_OFFSET_MS)?;
        let output = Command::new("date")
            .arg("+%s")
            .envs(self.env())
            .stdin(Stdio::null())
            .output();
        self.set(0)?;
        let output = output
            .map_err(|e| io::Error::new(e.kind(), format!("running date to check it: {e}")))?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_secs();
        let expected = now + PROBE_OFFSET_MS.unsigned_abs() / 1000;
        let answer = String::from_utf8_lossy(&output.stdout);
        match answer.trim().parse::<u64>() {
            Ok(seen) if seen.abs_diff(expected) <= 60 => Ok(()),
            _ => Err(io::Error::other(format!(
                "the server clock library {} did not move the clock of `date +%s` a day \
                 ahead: it answered {:?} at {now}; stderr: {}",
                self.library.display(),
                answer.trim(),
                String::from_utf8_lossy(&output.stderr).trim()
            ))),
        }
    }
}

/// Compiles `source` into the shared library `library`.
fn compile(source: &Path, library: &Path) -> io::Result<()> {
    let compiler = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
    let output = Command::new(&compiler)
        .args(["-shared", "-fPIC", "-O2", "-Wall", "-o"])
        .arg(library)
        .arg(source)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            let name = compiler.to_string_lossy();
            if e.kind() == io::ErrorKind::NotFound {
                io::Error::new(
                    e.kind(),
                    format!(
                        "no C compiler: `{name}` is not on PATH. Moving a server's clock \
                         builds a small C library when it starts; install one \
                         (apt-get install gcc) or set CC to one"
                    ),
                )
            } else {
                io::Error::new(e.kind(), format!("running the C compiler `{name}`: {e}"))
            }
        })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "compiling {} failed ({}): {}",
            source.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    }
}

/// The 16 bytes of the control file for `offset_ms`: the offset and its
/// check, in native byte order, as `server_clock.c` reads them.
fn record(offset_ms: i64) -> [u8; 16] {
    let mut record = [0; 16];
    record[..8].copy_from_slice(&offset_ms.to_ne_bytes());
    record[8..].copy_from_slice(&mix(offset_ms).to_ne_bytes());
    record
}

/// The check of an offset: `mix` in `server_clock.c` (splitmix64's
/// finalizer), so that a record read while half rewritten fails it.
fn mix(offset_ms: i64) -> u64 {
    let mut z = u64::from_ne_bytes(offset_ms.to_ne_bytes()) ^ 0x9e37_79b9_7f4a_7c15;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpStream;

    use super::*;
    use crate::harness::RedisServer;

    /// Seconds since the epoch on the test's own clock.
    fn now() -> i64 {
        let since = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("a clock after 1970");
        i64::try_from(since.as_secs()).expect("seconds fit an i64")
    }

    /// `date +%s` run on `clock`.
    fn date_on(clock: &ServerClock) -> i64 {
        let output = Command::new("date")
            .arg("+%s")
            .envs(clock.env())
            .output()
            .expect("running date");
        String::from_utf8_lossy(&output.stdout)
            .trim()
            .parse()
            .expect("date +%s prints a number")
    }

    fn assert_near(seen: i64, expected: i64, what: &str) {
        assert!(
            (seen - expected).abs() <= 5,
            "{what}: read {seen}, expected {expected} (within 5 s)"
        );
    }

    /// The offset is the whole interface: ahead, behind and back to the
    /// real time, read by a program at its next clock read. A record that
    /// fails its check (a file written by something else, or caught half
    /// rewritten) must read as no offset, never as a stray one.
    #[test]
    fn a_program_on_the_clock_reads_the_wall_clock_moved_either_way_and_back() {
        let clock = ServerClock::new().expect("a server clock");
        assert_near(date_on(&clock), now(), "at offset 0");
        clock.set(3_600_000).expect("set +1 h");
        assert_near(date_on(&clock), now() + 3600, "at +1 h");
        clock.set(-7_200_000).expect("set -2 h");
        assert_near(date_on(&clock), now() - 7200, "at -2 h");

        let mut torn = record(-7_200_000);
        torn[8] ^= 1;
        std::fs::write(&clock.control, torn).expect("writing a record that fails its check");
        assert_near(date_on(&clock), now(), "with a record that fails its check");

        clock.set(0).expect("set 0");
        assert_near(date_on(&clock), now(), "back at offset 0");
    }

    /// The fault the clock exists for: a Redis lease outlived by its
    /// holder's belief. The running server must see the move at once (no
    /// restart, no reconnect), and a restarted one must come back on the
    /// same clock, or a kill fault would silently end the clock fault.
    #[test]
    fn redis_expires_a_key_by_the_moved_clock_at_once_and_restarts_on_it() {
        let clock = ServerClock::new().expect("a server clock");
        let Some(mut server) = RedisServer::start_with_env(&[], &clock.env()) else {
            return;
        };
        let time = |server: &RedisServer| -> i64 {
            let client = redis::Client::open(server.url()).expect("a client");
            let mut connection = client.get_connection().expect("a connection");
            let (seconds, _micros): (i64, i64) =
                redis::cmd("TIME").query(&mut connection).expect("TIME");
            seconds
        };
        let client = redis::Client::open(server.url()).expect("a client");
        let mut connection = client.get_connection().expect("a connection");
        let _: () = redis::cmd("SET")
            .arg("lease")
            .arg("holder")
            .arg("PX")
            .arg(10_000)
            .query(&mut connection)
            .expect("SET");
        assert_near(time(&server), now(), "TIME at offset 0");

        clock.set(20_000).expect("set +20 s");
        assert_near(time(&server), now() + 20, "TIME at +20 s");
        let lease: Option<String> = redis::cmd("GET")
            .arg("lease")
            .query(&mut connection)
            .expect("GET");
        assert_eq!(
            lease, None,
            "a key set with PX 10000 must be gone once the server's clock is 20 s ahead"
        );

        server.restart().expect("restarting the server");
        assert_near(
            time(&server),
            now() + 20,
            "TIME at +20 s after a restart: the server must come back on the clock",
        );
    }

    /// memcached reads the wall clock once, at start, and counts on its
    /// monotonic clock from there: a running server ignores the move (its
    /// items expire on time), a restarted one starts from the moved clock.
    /// The restart also shows that `Server` keeps its environment.
    #[test]
    fn memcached_ignores_a_moved_clock_until_it_restarts_on_it() {
        let clock = ServerClock::new().expect("a server clock");
        let Some(mut server) = crate::memcached::start_with_env(&[], &clock.env()) else {
            return;
        };
        let stats_time = |port: u16| -> i64 {
            let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
            stream.write_all(b"stats\r\n").expect("stats");
            let mut reply = String::new();
            let mut buffer = [0; 4096];
            while !reply.ends_with("END\r\n") {
                let read = stream.read(&mut buffer).expect("the stats");
                assert!(read > 0, "memcached closed the connection: {reply}");
                reply.push_str(&String::from_utf8_lossy(&buffer[..read]));
            }
            reply
                .lines()
                .find_map(|line| line.strip_prefix("STAT time "))
                .and_then(|time| time.trim().parse().ok())
                .unwrap_or_else(|| panic!("no STAT time in {reply}"))
        };
        clock.set(3_600_000).expect("set +1 h");
        assert_near(
            stats_time(server.port),
            now(),
            "a running memcached's time, 1 h after its clock moved",
        );
        server
            .restart(crate::memcached::ready)
            .expect("restarting memcached");
        assert_near(
            stats_time(server.port),
            now() + 3600,
            "the time of memcached restarted on a clock 1 h ahead",
        );
    }
}
