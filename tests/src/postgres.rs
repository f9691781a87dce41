//! The PostgreSQL server for the tests: `POSTGRES_URL`, or the local
//! server these machines run (`postgres://postgres@127.0.0.1:5432/test`).
//! Without either the tests skip loudly, and under `CI=true` they fail.
//!
//! Each test process keeps its tables in a schema of its own,
//! `lock_tests_<pid>_<random>`, so runs never see each other's rows;
//! schemas left by test processes that are gone are dropped the first time
//! a process asks for its own.

use std::sync::OnceLock;

use lock_core::{LockManager, PostgresConfig, PostgresStore};

use crate::harness::unavailable;

/// The local server, when `POSTGRES_URL` is not set.
const LOCAL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// The server's URL, or `None` (after the notice) when none answers.
pub fn postgres_url() -> Option<String> {
    static FOUND: OnceLock<Result<String, String>> = OnceLock::new();
    let found = FOUND.get_or_init(|| {
        let url = std::env::var("POSTGRES_URL").unwrap_or_else(|_| LOCAL.to_owned());
        // Checked on a thread and runtime of its own: callers may be inside
        // a runtime, where another cannot be started.
        let checking = url.clone();
        let checked = std::thread::spawn(move || check(&checking))
            .join()
            .map_err(|_| "the PostgreSQL check panicked".to_owned())
            .and_then(|checked| checked);
        let source = if std::env::var("POSTGRES_URL").is_ok() {
            "POSTGRES_URL"
        } else {
            "the local server"
        };
        crate::harness::announce(
            "PostgreSQL",
            &checked.clone().map(|()| format!("{source} {url}")),
        );
        checked.map(|()| url)
    });
    match found {
        Ok(url) => Some(url.clone()),
        Err(why) => unavailable("PostgreSQL tests", why),
    }
}

/// Connects to `url` and drops stale schemas, or says why it cannot.
fn check(url: &str) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let connecting = tokio_postgres::connect(url, tokio_postgres::NoTls);
        match tokio::time::timeout(std::time::Duration::from_secs(5), connecting).await {
            Ok(Ok((client, connection))) => {
                tokio::spawn(connection);
                drop_stale_schemas(&client).await;
                Ok(())
            }
            Ok(Err(e)) => Err(format!("{url}: {e}; set POSTGRES_URL or start PostgreSQL")),
            Err(_) => Err(format!("{url} did not answer within 5 s")),
        }
    })
}

/// Drops the schemas of test processes that no longer run.
async fn drop_stale_schemas(client: &tokio_postgres::Client) {
    let Ok(rows) = client
        .query(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'lock_tests_%'",
            &[],
        )
        .await
    else {
        return;
    };
    for row in rows {
        let name: String = row.get(0);
        let pid = name
            .split('_')
            .nth(2)
            .and_then(|pid| pid.parse::<u32>().ok());
        let running = pid.is_some_and(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists());
        if !running {
            let _ = client
                .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{name}\" CASCADE"))
                .await;
        }
    }
}

/// This process's schema.
pub fn schema() -> &'static str {
    static SCHEMA: OnceLock<String> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        format!(
            "lock_tests_{}_{:08x}",
            std::process::id(),
            rand::random::<u32>()
        )
    })
}

/// This process's configuration: its own schema.
pub fn config() -> PostgresConfig {
    PostgresConfig::new().schema(schema())
}

/// A fresh store on the server, in this process's schema.
pub async fn postgres_store() -> Option<PostgresStore> {
    let url = postgres_url()?;
    Some(
        PostgresStore::connect_with(&url, config())
            .await
            .unwrap_or_else(|e| panic!("connecting to PostgreSQL: {e}")),
    )
}

/// A manager over a fresh store on the server.
pub async fn postgres_manager() -> Option<LockManager> {
    postgres_store().await.map(LockManager::new)
}

/// A plain client for inspecting the tables (row counts, backends).
pub async fn client(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    client
}
