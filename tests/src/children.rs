//! Child processes for the cross-process tests (the `lock-child` binary),
//! killed when a test ends, however it ends.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Starts `program` (the test's `env!("CARGO_BIN_EXE_lock-child")`) with
/// `args`, its stdout piped for [`read_line`].
pub fn spawn(program: &str, args: &[&str]) -> Child {
    spawn_with(program, args, &[])
}

/// As [`spawn`], with extra environment variables.
pub fn spawn_with(program: &str, args: &[&str], env: &[(&str, &str)]) -> Child {
    Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn lock-child")
}

/// Children that are killed when this is dropped, so none outlive a failed
/// test.
pub struct Children(pub Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Reads one line from a child's stdout, on a thread, so a silent child
/// trips the hang guard instead of hanging the test.
pub fn read_line(child: &mut Child, guard: Duration) -> String {
    let stdout = child.stdout.take().expect("piped stdout");
    let (send, receive) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = send.send(line);
    });
    receive
        .recv_timeout(guard)
        .unwrap_or_else(|_| panic!("a child said nothing within {guard:?}"))
        .trim()
        .to_owned()
}

/// Every child's one-line report, after checking each exited cleanly.
pub fn reports(children: &mut Children, guard: Duration) -> Vec<String> {
    children
        .0
        .iter_mut()
        .map(|child| {
            let line = read_line(child, guard);
            let status = child.wait().expect("child exit");
            assert!(status.success(), "a child exited with {status}: {line}");
            line
        })
        .collect()
}

/// Every line a child prints, as it prints them, for children that say
/// more than one thing.
pub struct Lines(std::sync::mpsc::Receiver<String>);

impl Lines {
    /// Starts reading `child`'s stdout on a thread.
    pub fn of(child: &mut Child) -> Lines {
        let stdout = child.stdout.take().expect("piped stdout");
        let (send, receive) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if send.send(line.trim().to_owned()).is_err() {
                    return;
                }
            }
        });
        Lines(receive)
    }

    /// The next line, or a panic after `guard`.
    pub fn next(&self, guard: Duration) -> String {
        self.0
            .recv_timeout(guard)
            .unwrap_or_else(|_| panic!("a child said nothing within {guard:?}"))
    }
}

/// The cross-process exclusion check every store runs: `processes` copies
/// of `program` (`lock-child`) each do `tasks` x `rounds` read-yield-write
/// increments of a counter in a file, each under the lock `counter` on the
/// store at `url` (with leases of `ttl_ms`); returns the final count, which
/// is `processes x tasks x rounds` unless two holders overlapped.
pub fn file_increments_across_processes(
    program: &str,
    url: &str,
    prefix: &str,
    env: &[(&str, &str)],
    (processes, tasks, rounds): (usize, usize, usize),
    ttl_ms: u64,
) -> u64 {
    let dir = std::env::temp_dir().join(format!(
        "lock-tests-{}-{:016x}",
        prefix.trim_end_matches(':'),
        rand::random::<u64>()
    ));
    std::fs::create_dir_all(&dir).expect("dir");
    let counter = dir.join("counter");
    let path = counter.to_string_lossy().into_owned();
    let (tasks_text, rounds_text, ttl_text) =
        (tasks.to_string(), rounds.to_string(), ttl_ms.to_string());
    let mut children = Children(
        (0..processes)
            .map(|_| {
                spawn_with(
                    program,
                    &[
                        "contend-file",
                        url,
                        prefix,
                        "counter",
                        &path,
                        &tasks_text,
                        &rounds_text,
                        &ttl_text,
                    ],
                    env,
                )
            })
            .collect(),
    );
    let expected = format!("done {}", tasks * rounds);
    for line in reports(&mut children, Duration::from_secs(240)) {
        assert_eq!(line, expected, "each process did its increments");
    }
    let total = std::fs::read_to_string(&counter)
        .expect("counter file")
        .trim()
        .parse()
        .expect("a number");
    let _ = std::fs::remove_dir_all(&dir);
    total
}

/// What [`read_write_across_processes`] saw.
#[derive(Debug)]
pub struct ReadWriteRun {
    /// The counter's final value: every write once, unless writers overlapped.
    pub total: u64,
    /// Writes done, over every process.
    pub writes: usize,
    /// Reads done, over every process.
    pub reads: usize,
    /// Reads that found a write under way: 0 unless a reader overlapped a
    /// writer.
    pub torn: usize,
}

/// The read side across processes: `processes` copies of `program`
/// (`lock-child read-write-file`) each run `writers` tasks updating a
/// counter file in visible steps under the lock `shared-file`, and `readers`
/// tasks reading it under the lock's read side, `rounds` times each.
pub fn read_write_across_processes(
    program: &str,
    url: &str,
    prefix: &str,
    env: &[(&str, &str)],
    (processes, writers, readers, rounds): (usize, usize, usize, usize),
    ttl_ms: u64,
) -> ReadWriteRun {
    let dir = std::env::temp_dir().join(format!(
        "lock-tests-rw-{}-{:016x}",
        prefix.trim_end_matches(':'),
        rand::random::<u64>()
    ));
    std::fs::create_dir_all(&dir).expect("dir");
    let counter = dir.join("counter");
    let path = counter.to_string_lossy().into_owned();
    let numbers = [writers, readers, rounds].map(|n| n.to_string());
    let ttl = ttl_ms.to_string();
    let mut children = Children(
        (0..processes)
            .map(|_| {
                spawn_with(
                    program,
                    &[
                        "read-write-file",
                        url,
                        prefix,
                        "shared-file",
                        &path,
                        &numbers[0],
                        &numbers[1],
                        &numbers[2],
                        &ttl,
                    ],
                    env,
                )
            })
            .collect(),
    );
    let mut run = ReadWriteRun {
        total: 0,
        writes: 0,
        reads: 0,
        torn: 0,
    };
    for line in reports(&mut children, Duration::from_secs(240)) {
        let figures: Vec<usize> = line
            .strip_prefix("done ")
            .unwrap_or_else(|| panic!("a process failed: {line}"))
            .split(' ')
            .map(|n| n.parse().expect("a count"))
            .collect();
        let [writes, reads, torn] = figures[..] else {
            panic!("three figures: {line}");
        };
        run.writes += writes;
        run.reads += reads;
        run.torn += torn;
    }
    run.total = std::fs::read_to_string(&counter)
        .expect("counter file")
        .trim()
        .parse()
        .expect("a number: the last write finished");
    let _ = std::fs::remove_dir_all(&dir);
    run
}

/// The manager a child process works through: over the store `url` names
/// (`lock_core::connect`'s schemes), under `prefix`, the PostgreSQL table
/// in the schema `LOCK_CHILD_PG_SCHEMA` names when it is set.
pub async fn manager(url: &str, prefix: &str) -> Result<lock_core::LockManager, String> {
    let mut options = lock_core::ConnectOptions::new();
    if let Ok(schema) = std::env::var("LOCK_CHILD_PG_SCHEMA") {
        options = options.postgres(lock_core::PostgresConfig::new().schema(schema));
    }
    let locks = lock_core::connect_with(url, options)
        .await
        .map_err(|e| format!("connect: {}", e.chain()))?;
    Ok(locks.with_prefix(prefix))
}

/// The flavors of `#[tokio::main]` the `exit-child` binary runs under.
pub const RUNTIMES: [&str; 2] = ["current-thread", "multi-thread"];

/// Runs `program` (the test's `env!("CARGO_BIN_EXE_exit-child")`) under
/// each flavor of `#[tokio::main]`: it takes a lock of a minute on `url`
/// and returns from `main` with the guard bound. Once it has exited, the
/// lease must be gone, as `locks` (a manager over the same store, any
/// prefix) sees it: the next run of a cron binary must not find the lock
/// held for the rest of its TTL. Each child has `guard` to exit.
pub async fn main_returning_with_a_guard_gives_it_back(
    program: &str,
    url: &str,
    locks: &lock_core::LockManager,
    env: &[(&str, &str)],
    guard: Duration,
) {
    const TTL: Duration = Duration::from_secs(60);
    for runtime in RUNTIMES {
        let id: u64 = rand::random();
        let prefix = format!("test-exit-{id:016x}:");
        let ttl_ms = TTL.as_millis().to_string();
        let mut child = spawn_with(program, &[runtime, url, &prefix, "job", &ttl_ms], env);
        assert_eq!(
            read_line(&mut child, guard),
            "held",
            "{runtime}: the child took the lock"
        );
        let exited = std::time::Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for the child") {
                break status;
            }
            if exited.elapsed() > guard {
                let _ = child.kill();
                panic!("{runtime}: a child returning from main did not exit within {guard:?}");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(
            status.success(),
            "{runtime}: the child exited with {status}"
        );
        let lock = locks.clone().with_prefix(&prefix).lock("job", TTL);
        assert!(
            !lock.is_held().await.expect("is_held"),
            "{runtime}: the lease of a guard dropped as main returned outlived its process \
             (exited {:?} after taking it; its ttl is {TTL:?})",
            exited.elapsed()
        );
    }
}
