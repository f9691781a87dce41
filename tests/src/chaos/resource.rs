//! The shared resource the workers change under their locks, and the
//! record of what happened, in a PostgreSQL schema of the run's own.
//!
//! ```text
//! resource   name | value | seen | version | writes    the fenced row per name
//! counter    name | value | writes                      the unfenced counter per name
//! intervals  one critical section: who, which lock, fence, started/ended
//!            on the server's clock, the versions its read and write saw,
//!            when the acquire that won its lease was sent
//! attempts   one call: when it began waiting, how long it was to wait, how
//!            it ended, the renewals that kept its lease, the acquire
//!            attempts it sent
//! faults     one injected fault: kind, target, started/ended, the names
//!            whose leases it could take (none listed: every name)
//! ```
//!
//! Every timestamp is the server's `clock_timestamp()`, the one clock all
//! processes share (a worker's own wall clock may be jumping).

use tokio_postgres::{Client, NoTls, Statement};

/// The run's tables, by schema.
#[derive(Clone, Debug)]
pub struct Schema(pub String);

impl Schema {
    /// A fresh schema name for this run. It starts like the test
    /// processes' schemas (`lock_tests_<pid>_`), so that the tests' cleanup
    /// drops it once this process is gone, whatever ended it.
    pub fn fresh() -> Schema {
        Schema(format!(
            "lock_tests_{}_chaos_{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ))
    }

    /// `"schema".table`.
    fn table(&self, table: &str) -> String {
        format!("\"{}\".{table}", self.0)
    }

    /// Creates the schema, its tables, and a row per name (`n0`, `n1`...,
    /// and one more, `n<names>`, that only the late fault takes) in the
    /// resource and the counter.
    pub async fn create(&self, client: &Client, names: usize) -> Result<(), String> {
        let s = &self.0;
        let ddl = format!(
            "CREATE SCHEMA \"{s}\";
             CREATE TABLE \"{s}\".resource (name text PRIMARY KEY, value bigint NOT NULL DEFAULT 0,
                 seen bigint NOT NULL DEFAULT 0, version bigint NOT NULL DEFAULT 0,
                 writes bigint NOT NULL DEFAULT 0);
             CREATE TABLE \"{s}\".counter (name text PRIMARY KEY, value bigint NOT NULL DEFAULT 0,
                 writes bigint NOT NULL DEFAULT 0);
             CREATE TABLE \"{s}\".intervals (id bigserial PRIMARY KEY, name text NOT NULL,
                 mode text NOT NULL, worker text NOT NULL, fence bigint,
                 started timestamptz NOT NULL, ended timestamptz,
                 cancelled boolean NOT NULL DEFAULT false, claim_version bigint,
                 read_value bigint, write_version bigint, requested timestamptz);
             CREATE TABLE \"{s}\".attempts (id bigserial PRIMARY KEY, worker text NOT NULL,
                 name text NOT NULL, mode text NOT NULL, wait_started timestamptz NOT NULL,
                 finished timestamptz NOT NULL, outcome text NOT NULL, interval_id bigint,
                 detail text, renewals integer NOT NULL DEFAULT 0,
                 store_attempts integer NOT NULL DEFAULT 0, wait_us bigint);
             CREATE TABLE \"{s}\".faults (id bigserial PRIMARY KEY, kind text NOT NULL,
                 target text NOT NULL, started timestamptz NOT NULL, ended timestamptz,
                 detail text, names text[]);
             INSERT INTO \"{s}\".resource (name) SELECT 'n' || i FROM generate_series(0, {last}) i;
             INSERT INTO \"{s}\".counter (name) SELECT 'n' || i FROM generate_series(0, {last}) i;",
            // One more than the workers pick from: the late fault's own
            // name (see `faults::late`).
            last = names
        );
        client
            .batch_execute(&ddl)
            .await
            .map_err(|e| format!("creating the schema {s}: {e}"))
    }

    /// Drops the schema and everything in it.
    pub async fn drop(&self, client: &Client) -> Result<(), String> {
        client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.0))
            .await
            .map_err(|e| format!("dropping the schema {}: {e}", self.0))
    }

    /// The statements a worker runs, for this schema.
    pub fn statements(&self) -> Statements {
        let resource = self.table("resource");
        let counter = self.table("counter");
        let intervals = self.table("intervals");
        let attempts = self.table("attempts");
        let faults = self.table("faults");
        Statements {
            claim: format!(
                "WITH c AS (UPDATE {resource} SET seen = $3, version = version + 1
                            WHERE name = $1 AND seen <= $3 RETURNING value, version)
                 INSERT INTO {intervals} (id, name, mode, worker, fence, started, claim_version,
                                          read_value, requested)
                 VALUES ($4, $1, 'fenced', $2, $3, clock_timestamp(),
                         (SELECT version FROM c), (SELECT value FROM c),
                         clock_timestamp() - $5::bigint * interval '1 microsecond')
                 RETURNING id, read_value"
            ),
            write: format!(
                "WITH w AS (UPDATE {resource} SET value = $3, version = version + 1, writes = writes + 1
                            WHERE name = $1 AND seen <= $2 RETURNING version)
                 UPDATE {intervals} SET ended = clock_timestamp(), write_version = (SELECT version FROM w)
                 WHERE id = $4
                 RETURNING write_version"
            ),
            enter: format!(
                "WITH r AS (SELECT value FROM {counter} WHERE name = $1)
                 INSERT INTO {intervals} (id, name, mode, worker, started, read_value, requested)
                 VALUES ($3, $1, 'plain', $2, clock_timestamp(), (SELECT value FROM r),
                         clock_timestamp() - $4::bigint * interval '1 microsecond')
                 RETURNING id, read_value"
            ),
            exit: format!(
                "WITH w AS (UPDATE {counter} SET value = $2, writes = writes + 1 WHERE name = $1)
                 UPDATE {intervals} SET ended = clock_timestamp() WHERE id = $3"
            ),
            end: format!("UPDATE {intervals} SET ended = clock_timestamp() WHERE id = $1"),
            cancelled: format!(
                "UPDATE {intervals}
                 SET ended = clock_timestamp() - $2::bigint * interval '1 microsecond', cancelled = true
                 WHERE id = $1 AND ended IS NULL"
            ),
            attempt: format!(
                "INSERT INTO {attempts} (worker, name, mode, wait_started, finished, outcome,
                                         interval_id, detail, renewals, store_attempts, wait_us)
                 VALUES ($1, $2, $3, clock_timestamp() - $4::bigint * interval '1 microsecond',
                         clock_timestamp(), $5, $6, $7, $8, $9, $10)"
            ),
            fault: format!(
                "INSERT INTO {faults} (kind, target, started) VALUES ($1, $2, clock_timestamp())
                 RETURNING id"
            ),
        }
    }
}

/// The SQL a worker runs; see each field.
#[derive(Clone, Debug)]
pub struct Statements {
    /// Fenced section, first step: claim the row with the fence (refused
    /// when it has seen a higher one), read it, and open the interval, in
    /// one statement. `$1` name, `$2` worker, `$3` fence, `$4` the
    /// interval's id (chosen by the worker before it sends this, so that a
    /// section dropped while this is in flight can still close it), `$5`
    /// how many microseconds ago the acquire that won the lease was sent;
    /// returns the id and the value read (`NULL`: refused).
    pub claim: String,
    /// Fenced section, last step: write the new value if no higher fence
    /// has touched the row since, and close the interval. `$1` name, `$2`
    /// fence, `$3` value, `$4` interval; returns the row's version after
    /// the write (`NULL`: rejected).
    pub write: String,
    /// Plain section, first step: read the counter and open the interval.
    /// `$1` name, `$2` worker, `$3` the interval's id, `$4` how many
    /// microseconds ago the acquire that won the lease was sent; returns
    /// the id and the value.
    pub enter: String,
    /// Plain section, last step: write the counter and close the interval.
    /// `$1` name, `$2` value, `$3` interval.
    pub exit: String,
    /// Closes interval `$1` now.
    pub end: String,
    /// Closes interval `$1` as cancelled, `$2` microseconds ago (when the
    /// work was dropped), unless it was closed already.
    pub cancelled: String,
    /// Records one call. `$1` worker, `$2` name, `$3` mode, `$4` how many
    /// microseconds ago it began waiting, `$5` outcome, `$6` interval,
    /// `$7` detail, `$8` renewals, `$9` the acquire attempts it sent the
    /// store.
    pub attempt: String,
    /// Records the start of a fault a worker injects on itself (a pause
    /// before its write). `$1` kind, `$2` target; returns its id.
    pub fault: String,
}

impl Statements {
    /// Every statement prepared on `client`: a prepared statement goes out
    /// in the first poll of the query that runs it, with no round trip
    /// before, so a write begun is on its way even if the section is
    /// dropped right after (what a holder frozen just before its write
    /// sends when it wakes).
    pub async fn prepare(&self, client: &Client) -> Result<Prepared, String> {
        let prepare = |sql: &str| {
            let sql = sql.to_owned();
            async move {
                client
                    .prepare(&sql)
                    .await
                    .map_err(|e| format!("preparing the resource's statements: {e}"))
            }
        };
        Ok(Prepared {
            claim: prepare(&self.claim).await?,
            write: prepare(&self.write).await?,
            enter: prepare(&self.enter).await?,
            exit: prepare(&self.exit).await?,
            end: prepare(&self.end).await?,
            cancelled: prepare(&self.cancelled).await?,
            attempt: prepare(&self.attempt).await?,
            fault: prepare(&self.fault).await?,
        })
    }
}

/// [`Statements`], prepared on one connection.
#[derive(Clone, Debug)]
pub struct Prepared {
    /// See [`Statements::claim`].
    pub claim: Statement,
    /// See [`Statements::write`].
    pub write: Statement,
    /// See [`Statements::enter`].
    pub enter: Statement,
    /// See [`Statements::exit`].
    pub exit: Statement,
    /// See [`Statements::end`].
    pub end: Statement,
    /// See [`Statements::cancelled`].
    pub cancelled: Statement,
    /// See [`Statements::attempt`].
    pub attempt: Statement,
    /// See [`Statements::fault`].
    pub fault: Statement,
}

/// A connection for the resource, named `application_name` on the
/// server (the PostgreSQL store's own connections are told apart by
/// theirs).
pub async fn connect(url: &str, application_name: &str) -> Result<Client, String> {
    let mut config: tokio_postgres::Config = url
        .parse()
        .map_err(|e| format!("the resource URL {url:?}: {e}"))?;
    config.application_name(application_name);
    config.connect_timeout(std::time::Duration::from_secs(5));
    let (client, connection) = config
        .connect(NoTls)
        .await
        .map_err(|e| format!("connecting to the resource at {url}: {e}"))?;
    tokio::spawn(connection);
    Ok(client)
}
