//! The `locks` binary end to end: this process holds locks through the
//! library, the binary runs against the same Redis (one server, a cluster,
//! and a primary behind Sentinel), and its output and exit codes are
//! checked.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use lock_core::{LockGuard, LockManager};
use lock_tests::harness;

const LONG: Duration = Duration::from_secs(60);

/// Runs `locks` with `args`, stdin closed (not a terminal), no `LOCK_URL`.
fn locks<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_locks"))
        .args(args)
        .env_remove("LOCK_URL")
        .env_remove(concat!("LOCKS", "_URL"))
        .stdin(Stdio::null())
        .output()
        .expect("run the locks binary")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `output`'s exit code, with what it printed when it is not `expected`.
fn assert_exit(output: &Output, expected: i32, what: &str) {
    assert_eq!(
        output.status.code(),
        Some(expected),
        "{what}: exit code\nstdout: {}\nstderr: {}",
        text(&output.stdout),
        text(&output.stderr)
    );
}

async fn hold(locks: &LockManager, name: &str) -> LockGuard {
    locks
        .lock(name, LONG)
        .acquire()
        .await
        .expect("acquire")
        .expect("free")
}

/// The whole operator session against the store at `url`, whose locks this
/// process takes through `manager`.
async fn list_inspect_and_release(manager: LockManager, url: &str) {
    let prefix = format!("cli-{:016x}:", rand::random::<u64>());
    let locks = manager.with_prefix(prefix.clone());
    let with = |rest: &[&str]| {
        let mut args = vec![
            "--url".to_owned(),
            url.to_owned(),
            "--prefix".to_owned(),
            prefix.clone(),
        ];
        args.extend(rest.iter().map(|arg| (*arg).to_owned()));
        args
    };

    let empty = locks_run(&with(&["list"]));
    assert_exit(&empty, 0, "list with nothing held");
    assert!(
        text(&empty.stdout).contains("no locks held"),
        "{}",
        text(&empty.stdout)
    );

    let acme = hold(&locks, "reports:acme").await;
    let nightly = hold(&locks, "nightly").await;
    let owner = acme.owner().to_owned();

    // The table: a header, then both locks, sorted, with this process as holder.
    let listed = locks_run(&with(&["list"]));
    assert_exit(&listed, 0, "list");
    let stdout = text(&listed.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "a header and two locks:\n{stdout}");
    assert!(
        lines[0].starts_with("NAME") && lines[0].contains("REMAINING"),
        "{stdout}"
    );
    assert!(
        lines[1].starts_with("nightly ") && lines[1].contains(&owner),
        "{stdout}"
    );
    assert!(
        lines[2].starts_with("reports:acme ") && lines[2].contains(&owner),
        "{stdout}"
    );
    assert!(
        !stdout.contains(acme.token()),
        "the token is never shown:\n{stdout}"
    );

    // The same as JSON.
    let json = locks_run(&with(&["list", "--json"]));
    assert_exit(&json, 0, "list --json");
    let rows: serde_json::Value =
        serde_json::from_slice(&json.stdout).expect("list --json is JSON");
    let rows = rows.as_array().expect("an array");
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1]["name"], "reports:acme");
    assert_eq!(rows[1]["holder"], owner.as_str());
    let remaining = rows[1]["remaining_ms"].as_u64().expect("remaining_ms");
    assert!(
        (50_000..=60_000).contains(&remaining),
        "remaining {remaining} ms"
    );

    // Inspect: held (0), free (1).
    let inspected = locks_run(&with(&["inspect", "reports:acme"]));
    assert_exit(&inspected, 0, "inspect a held lock");
    let stdout = text(&inspected.stdout);
    assert!(stdout.contains(&format!("held by {owner}")), "{stdout}");
    let free = locks_run(&with(&["inspect", "nobody-holds-this"]));
    assert_exit(&free, 1, "inspect a free lock");
    assert!(
        text(&free.stdout).contains("free"),
        "{}",
        text(&free.stdout)
    );

    // Release without a terminal and without --yes: refused, nothing freed.
    let refused = locks_run(&with(&["release", "reports:acme", "--reason", "test"]));
    assert_exit(&refused, 2, "release without confirmation");
    assert!(
        text(&refused.stderr).contains("--yes"),
        "says how: {}",
        text(&refused.stderr)
    );
    assert!(
        acme.is_still_held().await.expect("read"),
        "a refused release frees nothing"
    );

    // Release with --yes: the lease is gone, the reason and holder logged.
    let released = locks_run(&with(&[
        "release",
        "reports:acme",
        "--reason",
        "job hung, ticket 4411",
        "--yes",
    ]));
    assert_exit(&released, 0, "release");
    assert!(
        text(&released.stdout).contains("released reports:acme"),
        "{}",
        text(&released.stdout)
    );
    let log = text(&released.stderr);
    assert!(log.contains("WARN"), "logged at WARN: {log}");
    assert!(
        log.contains("job hung, ticket 4411"),
        "the reason is logged: {log}"
    );
    assert!(log.contains(&owner), "the previous holder is logged: {log}");
    assert!(
        !acme.is_still_held().await.expect("read"),
        "the lease is gone"
    );
    assert!(
        nightly.is_still_held().await.expect("read"),
        "the other lock is untouched"
    );

    // Again: not held (1).
    let again = locks_run(&with(&[
        "release",
        "reports:acme",
        "--reason",
        "again",
        "--yes",
    ]));
    assert_exit(&again, 1, "release a free lock");
    assert!(
        text(&again.stdout).contains("nothing to release"),
        "{}",
        text(&again.stdout)
    );

    let names: Vec<String> = locks
        .list()
        .await
        .expect("list")
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names, ["nightly"]);
    nightly.release().await.expect("release");
    drop(acme);
}

fn locks_run(args: &[String]) -> Output {
    locks(args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_lists_inspects_and_releases_locks_on_one_redis_server() {
    let Some(url) = harness::redis_url() else {
        return;
    };
    let Some(manager) = harness::redis_manager().await else {
        return;
    };
    harness::say(&format!("locks CLI against Redis at {url}"));
    list_inspect_and_release(manager, &url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_lists_inspects_and_releases_locks_on_a_redis_cluster() {
    let Some(urls) = harness::cluster_urls() else {
        return;
    };
    let Some(manager) = harness::cluster_manager().await else {
        return;
    };
    // The redis+cluster:// form, with every seed.
    let hosts: Vec<&str> = urls
        .iter()
        .map(|url| url.trim_start_matches("redis://").trim_end_matches('/'))
        .collect();
    let url = format!("redis+cluster://{}", hosts.join(","));
    harness::say(&format!("locks CLI against the Redis Cluster at {url}"));
    list_inspect_and_release(manager, &url).await;
    // And the comma-separated list of plain URLs reaches the same cluster.
    let listed = locks(&["--url", &urls.join(","), "list"]);
    assert_exit(&listed, 0, "list through a comma-separated URL list");
}

#[test]
fn usage_and_connection_errors_exit_2_and_never_print_a_password() {
    let no_url = locks(&["list"]);
    assert_exit(&no_url, 2, "no --url");
    assert!(
        text(&no_url.stderr).contains("--url"),
        "{}",
        text(&no_url.stderr)
    );

    let unknown = locks(&["--url", "ftp://user:topsecret@host/", "list"]);
    assert_exit(&unknown, 2, "an unknown scheme");
    let stderr = text(&unknown.stderr);
    assert!(
        stderr.contains("redis://"),
        "lists the schemes it knows: {stderr}"
    );
    assert!(!stderr.contains("topsecret"), "password printed: {stderr}");

    // Nothing listens on port 1.
    let refused = locks(&[
        "--url",
        "redis://admin:topsecret@127.0.0.1:1",
        "--timeout",
        "2s",
        "list",
    ]);
    assert_exit(&refused, 2, "an unreachable server");
    let stderr = text(&refused.stderr);
    assert!(!stderr.is_empty(), "says what failed");
    assert!(!stderr.contains("topsecret"), "password printed: {stderr}");
}

#[test]
fn every_help_text_explains_itself_with_an_example() {
    for args in [
        &["--help"][..] as &[&str],
        &["list", "--help"],
        &["inspect", "--help"],
        &["release", "--help"],
        &["leader", "--help"],
    ] {
        let help = locks(args);
        assert_exit(&help, 0, &format!("{args:?}"));
        let stdout = text(&help.stdout);
        assert!(
            stdout.contains("Examples:"),
            "{args:?} has no examples:\n{stdout}"
        );
        assert!(
            stdout.contains("locks --url "),
            "{args:?} shows no command:\n{stdout}"
        );
    }
}

/// Behind Sentinel the operator gives the sentinels and the service, as
/// the application does; the tool finds the primary and sees its locks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_lists_inspects_and_releases_locks_behind_sentinel() {
    let Some(url) = lock_tests::sentinel::sentinel_url() else {
        return;
    };
    let Some(manager) = lock_tests::sentinel::sentinel_manager().await else {
        return;
    };
    harness::say(&format!("locks CLI through Sentinel at {url}"));
    list_inspect_and_release(manager, &url).await;
}

/// An operator asks who leads an election, and watches the leader change:
/// a resignation shows as nobody leading, the next leader with a greater
/// term, each on a line of its own as it happens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_sees_who_leads_and_watches_it_change() {
    use std::io::{BufRead as _, BufReader};
    let Some(url) = harness::redis_url() else {
        return;
    };
    let Some(manager) = harness::redis_manager().await else {
        return;
    };
    let prefix = format!("cli-{:016x}:", rand::random::<u64>());
    let locks = manager.with_prefix(prefix.clone());
    let run = |rest: &[&str]| {
        let mut args = vec!["--url", &url, "--prefix", &prefix];
        args.extend_from_slice(rest);
        locks_run(&args.iter().map(|arg| (*arg).to_owned()).collect::<Vec<_>>())
    };
    let nobody = run(&["leader", "jobs"]);
    assert_exit(&nobody, 1, "leader with nobody leading");
    assert!(
        text(&nobody.stdout).contains("jobs: nobody leads"),
        "{}",
        text(&nobody.stdout)
    );

    let election = locks.election("jobs", LONG).label("10.0.0.5:8080");
    let first = election.campaign().await.expect("campaign");
    let shown = run(&["leader", "jobs"]);
    assert_exit(&shown, 0, "leader with a leader");
    let stdout = text(&shown.stdout);
    assert!(
        stdout.contains(&format!(
            "jobs: led by 10.0.0.5:8080, term {}",
            first.term()
        )),
        "{stdout}"
    );
    let json: serde_json::Value =
        serde_json::from_slice(&run(&["leader", "jobs", "--json"]).stdout).expect("JSON");
    assert_eq!(json["leader"]["label"], "10.0.0.5:8080");
    assert_eq!(json["leader"]["term"], first.term());

    let mut watching = Command::new(env!("CARGO_BIN_EXE_locks"))
        .args([
            "--url", &url, "--prefix", &prefix, "leader", "jobs", "--watch", "--json",
        ])
        .env_remove("LOCK_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run locks leader --watch");
    let (said, lines) = std::sync::mpsc::channel();
    let stdout = watching.stdout.take().expect("piped");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            let Ok(value) = serde_json::from_str::<serde_json::Value>(&line) else {
                return;
            };
            if said.send(value).is_err() {
                return;
            }
        }
    });
    let next = || {
        lines
            .recv_timeout(Duration::from_secs(20))
            .expect("a line per change")
    };
    assert_eq!(next()["leader"]["term"], first.term(), "who leads now");
    let first_term = first.term();
    first.resign().await.expect("resign");
    assert_eq!(
        next()["leader"],
        serde_json::Value::Null,
        "nobody, once it resigned"
    );
    let second = election.campaign().await.expect("campaign");
    let seen = next();
    assert_eq!(seen["leader"]["term"], second.term(), "the next leader");
    assert!(second.term() > first_term, "with a greater term");
    let _ = watching.kill();
    let _ = watching.wait();
    second.resign().await.expect("resign");
}

/// The operator's session against a PostgreSQL server that takes only TLS
/// connections: the CA in the URL (`sslmode=verify-full&sslrootcert=`), or
/// in the flags, with a client certificate for a user let in only by one;
/// a wrong CA exits 2 saying which setting to change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_reaches_postgresql_over_tls_by_the_url_or_the_flags() {
    let Some(server) = lock_tests::postgres_tls::TlsPostgres::start() else {
        return;
    };
    let certs = server.certs();
    let path = |file: &std::path::Path| file.display().to_string();
    let (ca, cert, key) = (
        path(&certs.ca),
        path(&certs.client_cert),
        path(&certs.client_key),
    );
    let url = server.url(
        "postgres",
        "127.0.0.1",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    );
    harness::say(&format!("locks CLI against PostgreSQL over TLS at {url}"));
    let store = lock_core::PostgresStore::connect(&url)
        .await
        .expect("the store over TLS");
    let manager = LockManager::new(store);
    list_inspect_and_release(manager.clone(), &url).await;

    let _held = hold(&manager, "tls-by-flags").await;
    let bare = server.url("locks", "127.0.0.1", "sslmode=verify-full");
    let flags = |ca: &str| {
        locks(&[
            "--url",
            &bare,
            "--sslrootcert",
            ca,
            "--sslcert",
            &cert,
            "--sslkey",
            &key,
            "list",
        ])
    };
    let listed = flags(&ca);
    assert_exit(
        &listed,
        0,
        "list with the CA and client certificate as flags",
    );
    assert!(
        text(&listed.stdout).contains("tls-by-flags"),
        "{}",
        text(&listed.stdout)
    );
    let refused = flags(&path(&certs.other_ca));
    assert_exit(&refused, 2, "a wrong CA");
    assert!(
        text(&refused.stderr).contains("sslrootcert"),
        "says what to change: {}",
        text(&refused.stderr)
    );
}

/// Lock names and holders are whatever was written to the store: anyone who
/// can write a key must not be able to clear the operator's screen, retitle
/// the terminal or hide a row with escape sequences. The text output shows
/// them escaped; the JSON output carries them exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_and_holders_written_by_anyone_reach_the_terminal_escaped() {
    let Some(url) = harness::redis_url() else {
        return;
    };
    let Some(manager) = harness::redis_manager().await else {
        return;
    };
    let prefix = format!("cli-{:016x}:", rand::random::<u64>());
    let name = "evil\u{1b}[2J\u{1b}[1;1H";
    let owner = "\u{1b}]0;owned\u{7}web-1:1\r";
    let token = format!("{:032x}@{owner}", rand::random::<u128>());
    let key = format!("{prefix}{name}");
    let taken = manager
        .store()
        .acquire(lock_core::store::AcquireRequest::new(&key, &token, LONG))
        .await
        .expect("acquire");
    assert!(
        matches!(taken, lock_core::store::Attempt::Acquired { .. }),
        "the crafted lease is taken"
    );
    let run = |rest: &[&str]| {
        let mut args = vec!["--url", &url, "--prefix", &prefix];
        args.extend_from_slice(rest);
        locks(&args)
    };
    let raw = |c: char| c.is_control() && c != '\n';

    let listed = run(&["list"]);
    assert_exit(&listed, 0, "list");
    let stdout = text(&listed.stdout);
    assert!(
        !stdout.chars().any(raw),
        "list prints no raw control character: {stdout:?}"
    );
    assert!(
        stdout.contains(r"evil\u{1b}[2J\u{1b}[1;1H"),
        "list shows the name escaped: {stdout:?}"
    );
    assert!(
        stdout.contains(r"\u{1b}]0;owned\u{7}web-1:1\r"),
        "list shows the holder escaped: {stdout:?}"
    );

    let json = run(&["list", "--json"]);
    assert_exit(&json, 0, "list --json");
    let rows: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    assert_eq!(rows[0]["name"], name, "JSON carries the name exactly");
    assert_eq!(rows[0]["holder"], owner, "JSON carries the holder exactly");
    assert!(
        !text(&json.stdout).chars().any(raw),
        "JSON escapes control characters the JSON way: {:?}",
        text(&json.stdout)
    );

    let inspected = run(&["inspect", name]);
    assert_exit(&inspected, 0, "inspect");
    let stdout = text(&inspected.stdout);
    assert!(
        !stdout.chars().any(raw) && stdout.contains(r"held by \u{1b}]0;owned"),
        "inspect shows name and holder escaped: {stdout:?}"
    );

    let released = run(&["release", name, "--reason", "test", "--yes"]);
    assert_exit(&released, 0, "release");
    let (stdout, stderr) = (text(&released.stdout), text(&released.stderr));
    assert!(
        !stdout.chars().any(raw),
        "release prints no raw control character: {stdout:?}"
    );
    assert!(
        !stderr.chars().any(raw),
        "release logs no raw control character: {stderr:?}"
    );
    assert!(
        stderr.contains(r"\u{1b}]0;owned"),
        "the log names the previous holder, escaped: {stderr:?}"
    );
}

/// The operator's tool reads the store's URL from the variable the
/// application's own code reads in every example (`LOCK_URL`), so a shell
/// with the application's environment needs no `--url`; one name, used
/// alike by the README, the crate docs, the examples and this tool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_url_comes_from_lock_url_as_in_the_applications_environment() {
    let Some(url) = harness::redis_url() else {
        return;
    };
    let Some(manager) = harness::redis_manager().await else {
        return;
    };
    let prefix = format!("cli-{:016x}:", rand::random::<u64>());
    let held = hold(&manager.with_prefix(prefix.clone()), "from-the-environment").await;
    let listed = Command::new(env!("CARGO_BIN_EXE_locks"))
        .args(["--prefix", &prefix, "list"])
        .env("LOCK_URL", &url)
        .stdin(Stdio::null())
        .output()
        .expect("run the locks binary");
    assert_exit(&listed, 0, "list with the URL in LOCK_URL");
    assert!(
        text(&listed.stdout).contains("from-the-environment"),
        "the store LOCK_URL names is listed: {}",
        text(&listed.stdout)
    );
    let help = text(&locks(&["--help"]).stdout);
    assert!(
        help.contains("LOCK_URL"),
        "the help names the variable: {help}"
    );
    for (file, text) in [
        ("README.md", include_str!("../../README.md")),
        ("lock-cli/README.md", include_str!("../README.md")),
        (
            "lock-core/src/lib.rs",
            include_str!("../../lock-core/src/lib.rs"),
        ),
        (
            "lock-core/src/connect/mod.rs",
            include_str!("../../lock-core/src/connect/mod.rs"),
        ),
        (
            "lock-core/examples/leader.rs",
            include_str!("../../lock-core/examples/leader.rs"),
        ),
    ] {
        assert!(
            !text.contains(concat!("LOCKS", "_URL")),
            "{file} names the variable otherwise than LOCK_URL"
        );
    }
    held.release().await.expect("release");
}

/// A shell that still sets the variable earlier versions read, and not
/// `LOCK_URL` nor `--url`, is told of the rename and what to do, not
/// asked for a URL it believes it gave.
#[test]
fn the_old_url_variable_alone_is_named_with_the_new_one() {
    let old = concat!("LOCKS", "_URL");
    let ran = Command::new(env!("CARGO_BIN_EXE_locks"))
        .arg("list")
        .env_remove("LOCK_URL")
        .env(old, "redis://127.0.0.1:1")
        .stdin(Stdio::null())
        .output()
        .expect("run the locks binary");
    assert_exit(&ran, 2, "only the old variable set");
    let stderr = text(&ran.stderr);
    assert!(
        stderr.contains(old) && stderr.contains("LOCK_URL") && stderr.contains("rename"),
        "the error names both variables and what to do: {stderr}"
    );
}
