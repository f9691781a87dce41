//! `locks`: see which locks are held in a lock-core store, by whom and for how
//! long, and free a stuck one safely.
//!
//! ```text
//! locks --url redis://127.0.0.1:6379 list
//! locks --url redis://127.0.0.1:6379 inspect reports:acme
//! locks --url redis://127.0.0.1:6379 release reports:acme --reason "job hung, ticket 4411"
//! locks --url redis://127.0.0.1:6379 leader scheduler --watch
//! ```
//!
//! Exit codes: 0 done; 1 not held (nothing to show or release, or the
//! release was declined or found the lock changed hands); 2 usage or
//! connection error. `README.md` beside this crate's `Cargo.toml` is the
//! manual: every option, command, URL scheme and exit code.

mod leader;
mod show;
mod store;

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use lock_core::{Holder, LockManager};

use crate::show::printable;
use crate::store::Settings;

const EXAMPLES: &str = "\
Examples:
  locks --url redis://127.0.0.1:6379 list
  locks --url redis+cluster://10.0.0.1:6379,10.0.0.2:6379 --prefix billing: list --json
  locks --url postgres://app@db.internal/app inspect reports:acme
  locks --url redis://127.0.0.1:6379 release reports:acme --reason \"job hung, ticket 4411\"
  locks --url etcd://10.0.0.1:2379 leader scheduler --watch
  locks --url 'postgres://ops@db.internal/app?sslmode=verify-full&sslrootcert=/etc/ssl/db-ca.pem' list
  locks --url https://etcd-0.internal:2379 --sslrootcert ca.pem --sslcert ops.pem --sslkey ops.key list

Exit codes: 0 done; 1 not held (or nothing released); 2 usage or connection error.
Passwords in URLs are never printed. The URL may also come from LOCK_URL.";

/// See, inspect and free the locks held in a lock-core store.
///
/// Lists the locks an application holds (who holds each, for how much
/// longer), shows one, or frees one that is stuck: `release` frees exactly
/// the lease it showed you, never one taken after it.
#[derive(Parser, Debug)]
#[command(name = "locks", version, after_help = EXAMPLES)]
struct Cli {
    /// The store's URL, as the application's `lock_core::connect` takes it:
    /// redis://, redis+unix://, unix://, redis+cluster:// (or several
    /// redis:// URLs separated by commas), redis+sentinel:// and their
    /// rediss variants (TLS); memcache://, memcached://, memcaches://;
    /// postgres://, postgresql://; etcd://, http://, https://.
    #[arg(long, env = "LOCK_URL", value_name = "URL", hide_env_values = true)]
    url: String,

    /// The key prefix of the application's lock manager
    /// (`LockManager::with_prefix`).
    #[arg(long, default_value = lock_core::DEFAULT_PREFIX, value_name = "PREFIX")]
    prefix: String,

    /// How long each call to the store may take, like 500ms, 5s or 1m.
    #[arg(long, default_value = "5s", value_parser = parse_duration, value_name = "DURATION")]
    timeout: Duration,

    /// PostgreSQL: the schema of the lease table, if the application set one.
    #[arg(long, value_name = "SCHEMA")]
    pg_schema: Option<String>,

    /// PostgreSQL: the lease table, if the application renamed it.
    #[arg(long, value_name = "TABLE")]
    pg_table: Option<String>,

    /// TLS: the CA (a PEM file) that signed the server's certificate, when
    /// not a public one. The URL's `sslrootcert=` says the same and wins.
    #[arg(long, value_name = "FILE")]
    sslrootcert: Option<std::path::PathBuf>,

    /// TLS: a client certificate (a PEM file), for a server that asks for
    /// one; with --sslkey. The URL's `sslcert=` says the same and wins.
    #[arg(long, value_name = "FILE", requires = "sslkey")]
    sslcert: Option<std::path::PathBuf>,

    /// TLS: the client certificate's private key (a PEM file); with
    /// --sslcert. The URL's `sslkey=` says the same and wins.
    #[arg(long, value_name = "FILE", requires = "sslcert")]
    sslkey: Option<std::path::PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// List the held locks: name, holder (host:pid), remaining TTL, fence.
    #[command(after_help = "\
Examples:
  locks --url redis://127.0.0.1:6379 list
  locks --url redis://127.0.0.1:6379 --prefix billing: list --json | jq '.[].name'

On Redis the list is read with SCAN in batches (never KEYS): locks taken or
released while it runs may be missing or shown stale. Memcached cannot list.")]
    List {
        /// Print a JSON array of {name, holder, mode, remaining_ms, fence}.
        #[arg(long)]
        json: bool,
    },

    /// Show who holds one lock and for how long, or that it is free.
    #[command(after_help = "\
Examples:
  locks --url redis://127.0.0.1:6379 inspect reports:acme
  locks --url redis://127.0.0.1:6379 inspect reports:acme --json

Exits 0 when the lock is held, 1 when it is free.")]
    Inspect {
        /// The lock's name, without the prefix (as `list` shows it).
        name: String,
        /// Print {name, held, holder, remaining_ms, fence} as JSON.
        #[arg(long)]
        json: bool,
    },

    /// Free a lock whoever holds it: for a holder that is stuck or gone.
    #[command(after_help = "\
Examples:
  locks --url redis://127.0.0.1:6379 release reports:acme --reason \"job hung, ticket 4411\"
  locks --url redis://127.0.0.1:6379 release reports:acme --reason \"deploy\" --yes

The holder is not told: if it is still working, its work runs on alongside
the next holder. Only the lease shown is freed: if the lock changed hands
since, nothing is released (exit 1). The reason and the previous holder are
logged at WARN on stderr. Asks for confirmation on a terminal; elsewhere
pass --yes.")]
    Release {
        /// The lock's name, without the prefix (as `list` shows it).
        name: String,
        /// Why it is freed: logged with the previous holder, for the record.
        #[arg(long, value_name = "TEXT")]
        reason: String,
        /// Do not ask for confirmation.
        #[arg(long, short)]
        yes: bool,
    },

    /// Show who leads an election (`LockManager::election`): its label,
    /// term and lease; with --watch, every change until Ctrl-C.
    #[command(after_help = "\
Examples:
  locks --url redis://127.0.0.1:6379 leader scheduler
  locks --url postgres://app@db.internal/app leader scheduler --watch --json

Exits 0 when somebody leads, 1 when nobody does. --watch prints who leads
now, then a line per change: a new leader (its term is greater) or nobody.
It is told of changes by the store (memcached: read every second).")]
    Leader {
        /// The election's name, without the prefix.
        name: String,
        /// Print {name, leader: {label, term, since_ms, remaining_ms} | null}.
        #[arg(long)]
        json: bool,
        /// Print every change of leader until interrupted.
        #[arg(long)]
        watch: bool,
    },
}

/// How a command ended, as its exit code says.
pub(crate) enum Outcome {
    Done,
    NotHeld,
}

/// The variable earlier versions read the URL from.
const OLD_URL_VARIABLE: &str = "LOCKS_URL";

fn main() -> ExitCode {
    // A shell that still sets the old variable, and neither the new one
    // nor `--url`, is told of the rename rather than asked for a URL.
    if std::env::var_os("LOCK_URL").is_none()
        && std::env::var_os(OLD_URL_VARIABLE).is_some()
        && !std::env::args_os()
            .any(|arg| arg == "--url" || arg.to_string_lossy().starts_with("--url="))
    {
        eprintln!(
            "locks: {OLD_URL_VARIABLE} is set, and no longer read: the store's URL comes from \
             LOCK_URL (the variable the application reads) or --url; rename the variable"
        );
        return ExitCode::from(2);
    }
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(tracing::Level::WARN)
        .with_target(false)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("locks: could not start: {error}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(Outcome::Done) => ExitCode::SUCCESS,
        Ok(Outcome::NotHeld) => ExitCode::from(1),
        Err(message) => {
            // lock_core::connect's errors never show the URL's password,
            // and the stores' errors name hosts and ports only. They may
            // quote what a store holds: escaped, line by line.
            for line in message.lines() {
                eprintln!("locks: {}", printable(line));
            }
            ExitCode::from(2)
        }
    }
}

async fn run(cli: Cli) -> Result<Outcome, String> {
    let settings = Settings {
        timeout: cli.timeout,
        tls: store::tls(cli.sslrootcert, cli.sslcert.zip(cli.sslkey)),
        pg_schema: cli.pg_schema,
        pg_table: cli.pg_table,
    };
    let locks = store::connect(&cli.url, &cli.prefix, &settings).await?;
    match cli.command {
        Command::List { json } => list(&locks, json).await,
        Command::Inspect { name, json } => inspect(&locks, &name, json).await,
        Command::Release { name, reason, yes } => release(&locks, &name, &reason, yes).await,
        Command::Leader { name, json, watch } => leader::leader(&locks, &name, json, watch).await,
    }
}

async fn list(locks: &LockManager, json: bool) -> Result<Outcome, String> {
    let held = locks.list().await.map_err(|e| chain(&e))?;
    if json {
        let rows: Vec<_> = held
            .iter()
            .map(|(name, holder)| show::json_of(name, holder))
            .collect();
        println!("{}", serde_json::Value::Array(rows));
    } else if held.is_empty() {
        println!("no locks held under the prefix {:?}", locks.prefix());
    } else {
        print!("{}", show::table(&held));
    }
    Ok(Outcome::Done)
}

async fn holder_of(locks: &LockManager, name: &str) -> Result<Option<Holder>, String> {
    // The TTL is never used: nothing is acquired.
    let lock = locks.lock(name, Duration::from_secs(1));
    lock.holder().await.map_err(|e| chain(&e))
}

async fn inspect(locks: &LockManager, name: &str, json: bool) -> Result<Outcome, String> {
    let holder = holder_of(locks, name).await?;
    let shown = printable(name);
    match (&holder, json) {
        (Some(holder), true) => {
            let mut shown = show::json_of(name, holder);
            shown["held"] = true.into();
            println!("{shown}");
        }
        (None, true) => println!("{}", serde_json::json!({ "name": name, "held": false })),
        (Some(holder), false) => println!("{shown}: {}", described(holder)),
        (None, false) => println!("{shown}: free"),
    }
    Ok(match holder {
        Some(_) => Outcome::Done,
        None => Outcome::NotHeld,
    })
}

async fn release(
    locks: &LockManager,
    name: &str,
    reason: &str,
    yes: bool,
) -> Result<Outcome, String> {
    if reason.trim().is_empty() {
        return Err(
            "give a --reason: it is logged with the previous holder, for the record".into(),
        );
    }
    let key = format!("{}{name}", locks.prefix());
    // What the terminal and the log show: the name as given, the key and
    // the holder as the store has them, all escaped.
    let (shown, shown_key) = (printable(name), printable(&key));
    let Some(holder) = holder_of(locks, name).await? else {
        println!("{shown}: free, nothing to release");
        return Ok(Outcome::NotHeld);
    };
    println!("{shown}: {}", described(&holder));
    if !yes && !confirmed(&shown)? {
        println!("{shown}: left as it is");
        return Ok(Outcome::NotHeld);
    }
    // Compare-and-delete on the token of the holder shown: if the lock
    // changed hands since, the new holder's lease is left alone.
    let released = locks
        .store()
        .release(&key, holder.token())
        .await
        .map_err(|e| chain(&e))?;
    if !released {
        println!(
            "{shown}: its lease ended or changed hands since it was read; nothing released (run inspect again)"
        );
        return Ok(Outcome::NotHeld);
    }
    tracing::warn!(
        lock = %shown,
        key = %shown_key,
        store = locks.store().name(),
        reason = %printable(reason),
        previous_holder = %printable(holder.owner()),
        remaining_ms = holder.remaining_ttl().as_millis() as u64,
        fence = ?holder.fence(),
        "lock released by an operator"
    );
    println!("released {shown}, which was {}", described(&holder));
    Ok(Outcome::Done)
}

/// `error` and each of its causes that its message does not already say.
pub(crate) fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(next) = cause {
        let said = next.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        cause = next.source();
    }
    text
}

/// "held by web-1:4242 for 9m 58s more (fence 17)"; "read by ..." for a
/// reader. The holder is escaped ([`printable`]): the store says who.
fn described(holder: &Holder) -> String {
    let fence = holder
        .fence()
        .map_or_else(String::new, |fence| format!(" (fence {fence})"));
    let verb = if holder.is_reader() { "read" } else { "held" };
    format!(
        "{verb} by {} for {} more{fence}",
        printable(holder.owner()),
        show::remaining(holder.remaining_ttl())
    )
}

/// Asks on the terminal; refuses to guess anywhere else. `name` is the
/// lock's name as shown (escaped).
fn confirmed(name: &str) -> Result<bool, String> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(format!(
            "not releasing {name} without confirmation: stdin is not a terminal; pass --yes to release from a script"
        ));
    }
    eprint!(
        "Release {name}? Its holder is not told, and any work it still does runs alongside the next holder. [y/N] "
    );
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    stdin
        .lock()
        .read_line(&mut answer)
        .map_err(|e| format!("could not read the answer: {e}"))?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes" | "YES" | "Yes"))
}

/// `500ms`, `5s`, `2m`, `1h`: one number and one unit.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration; write it like 500ms, 5s or 1m"))?;
    let too_long = || format!("{text:?} is too long; write a timeout like 500ms, 5s or 1m");
    let duration = match unit.trim() {
        "ms" => Duration::from_millis(number),
        "s" | "" => Duration::from_secs(number),
        "m" => Duration::from_secs(number.checked_mul(60).ok_or_else(too_long)?),
        "h" => Duration::from_secs(number.checked_mul(3600).ok_or_else(too_long)?),
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?}; use ms, s, m or h"
            ));
        }
    };
    if duration.is_zero() {
        return Err("a zero timeout would fail every call; give one like 5s".to_owned());
    }
    Ok(duration)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_their_units_and_bad_ones_say_how_to_write_them() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("soon").expect_err("bad").contains("500ms"));
        assert!(
            parse_duration("3d")
                .expect_err("bad")
                .contains("ms, s, m or h")
        );
        assert!(parse_duration("0s").is_err());
    }

    // `--timeout 999999999999999999h` overflowed the multiplication: a
    // panic in a debug build, a wrapped, wrong timeout in a release one.
    #[test]
    fn a_duration_too_long_to_represent_is_an_error_not_a_panic() {
        let message = parse_duration("999999999999999999h").expect_err("too long");
        assert!(message.contains("too long"), "{message}");
        assert!(parse_duration("99999999999999999999s").is_err());
    }

    #[test]
    fn the_command_line_is_well_formed() {
        use clap::CommandFactory as _;
        Cli::command().debug_assert();
    }
}
