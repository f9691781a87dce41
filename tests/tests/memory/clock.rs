//! The memory store's TTLs run on the monotonic clock, shown by moving the
//! wall clock under a running process with libfaketime.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Where Debian's `faketime` package puts the preload library.
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// An NTP step, a VM resumed after a pause or an operator's `date -s` moves
/// the wall clock by minutes or hours. A lease timed on it would vanish under
/// its holder (jump forward) or outlive its TTL (jump back). The child holds
/// a lease while its wall clock jumps 2 h forward and then back, and checks
/// the lease neither ends early nor outlives its TTL.
#[test]
fn wall_clock_jumps_neither_end_nor_stretch_a_memory_lease() {
    if !Path::new(LIBFAKETIME).exists() {
        let why = format!("{LIBFAKETIME} is missing; install it with `apt-get install faketime`");
        assert!(
            std::env::var("CI").map_or(true, |ci| ci != "true"),
            "under CI=true this test must run, not skip: {why}"
        );
        eprintln!("\n!!! SKIPPED: the wall-clock jump test\n!!! {why}\n");
        return;
    }
    let dir = std::env::temp_dir().join(format!("lock-clock-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let timestamp_file = dir.join("faketime");
    std::fs::write(&timestamp_file, "+0\n").expect("timestamp file");
    let mut child = Command::new(env!("CARGO_BIN_EXE_lock-child"))
        .args(["clock", timestamp_file.to_str().expect("utf-8 temp path")])
        .env("LD_PRELOAD", LIBFAKETIME)
        .env("FAKETIME_TIMESTAMP_FILE", &timestamp_file)
        .env("FAKETIME_NO_CACHE", "1")
        .env("DONT_FAKE_MONOTONIC", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn lock-child");
    let stdout = child.stdout.take().expect("piped stdout");
    let (send, receive) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = send.send(line);
    });
    let line = receive.recv_timeout(Duration::from_secs(60));
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    let line = line.expect("the child answers within a minute");
    assert!(
        line.starts_with("ok "),
        "the lease must follow the monotonic clock: {line}"
    );
}
