//! The lease table and the one statement behind each operation.
//!
//! Every time is the database's (`clock_timestamp()`, read once per
//! statement), never the client's. Every statement is sent with its
//! parameter types (`query_typed`): one round trip, no named prepared
//! statement, nothing kept in the session, so it runs through PgBouncer in
//! transaction mode.
//!
//! A lease row lives while its name is held: release deletes it, so the
//! lease table holds about one row per held name; a row whose holder died
//! without releasing is overwritten by the next acquire of its name, or
//! deleted by the sweep once expired. Fencing counters live in a table of
//! their own, one row per name that ever asked for a token, never deleted,
//! so a counter only ever grows whatever happens to the leases.

use super::read;

/// The statements, with the table's qualified name filled in.
pub(super) struct Statements {
    /// By `[fenced][waiting]`.
    pub(super) acquire: [[String; 2]; 2],
    /// A reader's acquire, by `[waiting]`.
    pub(super) read: [String; 2],
    pub(super) release: String,
    pub(super) extend: String,
    pub(super) holder: String,
    pub(super) held_by: String,
    pub(super) list: String,
    pub(super) sweep: String,
    /// A waiting writer's intent, taken back.
    pub(super) withdraw: String,
}

impl Statements {
    /// Every statement, on the lease table `leases` and the fencing
    /// counters `fences` (both schema-qualified).
    pub(super) fn new(leases: &str, fences: &str) -> Statements {
        Statements {
            acquire: [false, true].map(|fenced| {
                [false, true].map(|waiting| acquire(leases, fences, fenced, waiting))
            }),
            read: [false, true].map(|waiting| read::acquire(leases, waiting)),
            release: release(leases, fences),
            extend: extend(leases),
            holder: holder(leases, fences),
            held_by: held_by(leases),
            list: list(leases, fences),
            sweep: sweep(leases),
            withdraw: read::withdraw(leases),
        }
    }
}

/// The lease table and the fencing counters, for `CREATE ... IF NOT
/// EXISTS` and the store's docs ("The tables"), and the upgrade of a lease
/// table an earlier version made.
///
/// `leases`, one row per name:
/// - `name`: the store key (manager prefix + lock name);
/// - `token`: the writer's owner token, the proof release and extend check;
/// - `holder`: `host:pid` of the writer, for operators;
/// - `acquired_at`, `expires_at`: the writer's lease, on the database's
///   clock; no writer holds the name once `expires_at` has passed (a row
///   a reader made or took has no writer: `token` and `holder` are empty
///   and `expires_at` is when the reader got in);
/// - `waited_until`: someone waits for this name until then, so a release
///   before it must `NOTIFY`;
/// - `reader_tokens`, `reader_expiries`: the readers, one token and one
///   expiry each, at the same place in both arrays (`NULL`: none yet); a
///   reader holds the name until its expiry has passed;
/// - `writer_waits_until`: a writer waits for this name until then, so no
///   new reader gets in (writer preference).
///
/// `fences`: the last fencing token handed out for `name`.
///
/// The read side's columns are added to a table that lacks them, each
/// nullable without a default: PostgreSQL records that in the catalogue
/// without rewriting a row. The `ALTER TABLE` runs only when a column is
/// missing, so a connecting store never queues for the table's exclusive
/// lock once it has them.
pub(super) fn create_tables(leases: &str, fences: &str, sweep_index: &str) -> String {
    let literal = leases.replace('\'', "''");
    format!(
        "CREATE TABLE IF NOT EXISTS {leases} (
    name                text          PRIMARY KEY,
    token               text          NOT NULL,
    holder              text          NOT NULL,
    acquired_at         timestamptz   NOT NULL,
    expires_at          timestamptz   NOT NULL,
    waited_until        timestamptz,
    reader_tokens       text[],
    reader_expiries     timestamptz[],
    writer_waits_until  timestamptz
);
DO $lock_core$ BEGIN
    IF (SELECT count(*) FROM pg_catalog.pg_attribute
        WHERE attrelid = '{literal}'::regclass AND NOT attisdropped
          AND attname IN ({READ_COLUMNS})) < 3 THEN
        ALTER TABLE {leases}
            ADD COLUMN IF NOT EXISTS reader_tokens      text[],
            ADD COLUMN IF NOT EXISTS reader_expiries    timestamptz[],
            ADD COLUMN IF NOT EXISTS writer_waits_until timestamptz;
    END IF;
END $lock_core$;
CREATE INDEX IF NOT EXISTS {sweep_index} ON {leases} (expires_at);
CREATE TABLE IF NOT EXISTS {fences} (
    name   text   PRIMARY KEY,
    fence  bigint NOT NULL
);"
    )
}

/// The read side's columns, as SQL string literals.
const READ_COLUMNS: &str = "'reader_tokens', 'reader_expiries', 'writer_waits_until'";

/// Checks, without creating anything, that the lease table has every
/// column the statements use (for `create_table(false)`): fails naming a
/// missing one.
pub(super) fn check_tables(leases: &str, fences: &str) -> String {
    format!(
        "SELECT name, token, holder, acquired_at, expires_at, waited_until,
       reader_tokens, reader_expiries, writer_waits_until FROM {leases} LIMIT 0;
SELECT name, fence FROM {fences} LIMIT 0"
    )
}

/// How long a waiting writer's intent holds new readers off after its
/// last attempt, unless it acquires or stops waiting first (it takes its
/// intent back then): so a writer that died holds readers off this long at
/// most.
pub(super) const WRITER_INTENT: &str = "interval '2 seconds'";

/// How long a writer held off by readers sleeps at most before it tries
/// again (and so renews its intent), when no release wakes it first:
/// well inside [`WRITER_INTENT`], so the intent never lapses while the
/// writer still waits. Microseconds.
pub(super) const WRITER_RETRY_MICROS: i64 = 1_000_000;

/// Whether `{t}` has a reader whose lease lasts past `{now}`.
pub(super) fn live_readers(t: &str, now: &str) -> String {
    format!("EXISTS (SELECT FROM unnest({t}.reader_expiries) AS r(expires_at) WHERE r.expires_at > {now})")
}

/// A writer's acquire, as one `INSERT ... ON CONFLICT DO UPDATE`, in one
/// of four shapes so each caller pays only for what it asked: `waiting`
/// adds the marking of a held row (and the holder's remaining TTL);
/// `fenced` takes the next value of the name's counter in the same
/// statement when the acquire wins.
///
/// Parameters: `$1` name, `$2` token, `$3` holder, `$4` ttl in
/// microseconds. The row is taken when no writer's lease and no reader's
/// lasts (the readers' arrays are emptied then, and any writer's intent
/// cleared: the name is a writer's). Otherwise, for a waiting caller, it
/// is marked as waited for until just after the holder's expiry, and, when
/// readers hold it, as wanted by a writer for [`WRITER_INTENT`], so no new
/// reader gets in. Behind a writer it makes no such claim (as on Redis and
/// etcd): nothing would take it back if that writer's lease ran out
/// unreleased after this one stopped waiting.
/// Every decision reads the row itself, locked by the upsert, as the last
/// committed statement left it: a reader that got in a moment before is
/// seen. Returns one row, `(acquired, fence or NULL, remaining
/// microseconds, intent or NULL)`, or none for a held name and a caller
/// that does not wait (nothing is written then). Held off by readers, the
/// remaining time is the last reader's, but at most
/// [`WRITER_RETRY_MICROS`], so the waiter comes back to renew its intent;
/// and the intent is the row's `writer_waits_until` as this attempt left
/// it, for the waiter to take back if it stops waiting
/// ([`withdraw`](super::read::withdraw)).
pub(super) fn acquire(leases: &str, fences: &str, fenced: bool, waiting: bool) -> String {
    let now = "EXCLUDED.acquired_at";
    let free = format!("t.expires_at <= {now} AND NOT {}", live_readers("t", now));
    let update = if waiting {
        format!(
            "token        = CASE WHEN {free} THEN EXCLUDED.token ELSE t.token END,
        holder       = CASE WHEN {free} THEN EXCLUDED.holder ELSE t.holder END,
        acquired_at  = CASE WHEN {free} THEN EXCLUDED.acquired_at ELSE t.acquired_at END,
        expires_at   = CASE WHEN {free} THEN EXCLUDED.expires_at ELSE t.expires_at END,
        reader_tokens   = CASE WHEN {free} THEN NULL ELSE t.reader_tokens END,
        reader_expiries = CASE WHEN {free} THEN NULL ELSE t.reader_expiries END,
        writer_waits_until = CASE WHEN {free} THEN NULL
                                  WHEN t.expires_at > {now} THEN t.writer_waits_until
                                  ELSE GREATEST(t.writer_waits_until, {now} + {WRITER_INTENT}) END,
        waited_until = CASE WHEN {free} THEN t.waited_until
                            WHEN t.expires_at > {now}
                            THEN GREATEST(t.waited_until, t.expires_at + interval '250 milliseconds')
                            ELSE GREATEST(t.waited_until, {now} + {WRITER_INTENT}) END"
        )
    } else {
        format!(
            "token = EXCLUDED.token, holder = EXCLUDED.holder,
        acquired_at = EXCLUDED.acquired_at, expires_at = EXCLUDED.expires_at,
        reader_tokens = NULL, reader_expiries = NULL, writer_waits_until = NULL
    WHERE {free}"
        )
    };
    let (fence_cte, fence) = if fenced {
        (
            format!(
                ",
fence AS (
    INSERT INTO {fences} AS f (name, fence)
    SELECT $1, 1 FROM lease WHERE lease.acquired
    ON CONFLICT (name) DO UPDATE SET fence = f.fence + 1
    RETURNING f.fence, CASE WHEN $5::text IS NOT NULL THEN pg_notify($5, $6) IS NULL END)"
            ),
            "(SELECT fence.fence FROM fence)",
        )
    } else {
        (String::new(), "NULL::bigint")
    };
    format!(
        "WITH c AS MATERIALIZED (SELECT clock_timestamp() AS now),
lease AS (
    INSERT INTO {leases} AS t (name, token, holder, acquired_at, expires_at)
    SELECT $1, $2, $3, c.now, c.now + $4 * interval '1 microsecond' FROM c
    ON CONFLICT (name) DO UPDATE SET
        {update}
    RETURNING t.token = $2 AS acquired, t.expires_at, t.writer_waits_until,
              (SELECT max(r.expires_at) FROM unnest(t.reader_expiries) AS r(expires_at)) AS readers_until){fence_cte}
SELECT lease.acquired,
       {fence},
       CASE WHEN lease.expires_at > c.now OR lease.readers_until IS NULL
            THEN {writer_left}
            ELSE LEAST({readers_left}, {WRITER_RETRY_MICROS}) END,
       CASE WHEN NOT lease.acquired AND lease.expires_at <= c.now AND lease.readers_until > c.now
            THEN lease.writer_waits_until END
FROM lease, c",
        writer_left = micros_until("lease.expires_at"),
        readers_left = micros_until("lease.readers_until"),
    )
}

/// Microseconds from now to `at`, as a `bigint`.
pub(super) fn micros_until(at: &str) -> String {
    format!("(extract(epoch FROM {at} - clock_timestamp()) * 1000000)::bigint")
}

/// Release (or force-release), as one statement, with a `NOTIFY` when
/// someone waits and the name is now free for them, or when the name is
/// fenced (it has a counter in `fences`): an election's observers wait
/// for no lease of their own.
///
/// Parameters: `$1` name, `$2` token (`NULL`: the writer and every
/// reader), `$3` the notification channel, `$4` the notification payload.
/// The token is the writer's or a reader's. The writer's release (or a
/// force-release) deletes the row, waking whoever waits (readers may). A
/// reader's takes its token out of the arrays, with the readers whose
/// leases ended, and wakes the waiters once no reader is left (a writer
/// waits for that); the row, empty, is the sweep's. Each part decides on
/// the row as it is when locked, never as it was when the statement began:
/// two readers leaving at once each take out their own token. Returns one
/// row when a live lease was freed, none otherwise; its second column,
/// `freed`, says whether the name is now free (false while other readers
/// hold it).
pub(super) fn release(leases: &str, fences: &str) -> String {
    let kept = |column: &str| {
        format!(
            "ARRAY(SELECT r.{column}
            FROM unnest(t.reader_tokens, t.reader_expiries) WITH ORDINALITY AS r(token, expires_at, i)
            WHERE r.token <> $2 AND r.expires_at > c.now ORDER BY r.i)"
        )
    };
    format!(
        "WITH c AS MATERIALIZED (SELECT clock_timestamp() AS now),
gone AS (
    DELETE FROM {leases} AS t USING c
    WHERE t.name = $1
      AND CASE WHEN $2::text IS NULL THEN t.expires_at > c.now OR {any}
               ELSE t.token = $2 AND t.expires_at > c.now END
    RETURNING CASE WHEN t.waited_until > c.now
                     OR EXISTS (SELECT FROM {fences} AS f WHERE f.name = t.name)
                   THEN pg_notify($3, $4) IS NULL END,
              true AS freed),
reader AS (
    UPDATE {leases} AS t SET reader_tokens = {tokens}, reader_expiries = {expiries}
    FROM c
    WHERE t.name = $1
      AND EXISTS (SELECT FROM unnest(t.reader_tokens, t.reader_expiries) AS r(token, expires_at)
                  WHERE r.token = $2 AND r.expires_at > c.now)
    RETURNING CASE WHEN t.waited_until > c.now AND cardinality(t.reader_tokens) = 0
                   THEN pg_notify($3, $4) IS NULL END,
              cardinality(t.reader_tokens) = 0 AS freed)
SELECT * FROM gone UNION ALL SELECT * FROM reader",
        any = live_readers("t", "c.now"),
        tokens = kept("token"),
        expiries = kept("expires_at"),
    )
}

/// Extend, as one compare-and-update of the writer's `expires_at` or of
/// one reader's expiry: `$1` name, `$2` token, `$3` ttl in microseconds.
/// Returns a row when the lease was ours and still live.
pub(super) fn extend(leases: &str) -> String {
    format!(
        "WITH c AS MATERIALIZED (SELECT clock_timestamp() AS now)
UPDATE {leases} AS t SET
    expires_at = CASE WHEN t.token = $2 THEN c.now + $3 * interval '1 microsecond'
                      ELSE t.expires_at END,
    reader_expiries = CASE WHEN t.token = $2 THEN t.reader_expiries ELSE ARRAY(
        SELECT CASE WHEN r.token = $2 THEN c.now + $3 * interval '1 microsecond' ELSE r.expires_at END
        FROM unnest(t.reader_tokens, t.reader_expiries) WITH ORDINALITY AS r(token, expires_at, i)
        ORDER BY r.i) END
FROM c
WHERE t.name = $1
  AND ((t.token = $2 AND t.expires_at > c.now)
       OR EXISTS (SELECT FROM unnest(t.reader_tokens, t.reader_expiries) AS r(token, expires_at)
                  WHERE r.token = $2 AND r.expires_at > c.now))
RETURNING 1"
    )
}

/// The holder of `$1`: `(name, token, remaining microseconds, reader,
/// fence)`, the writer while its lease lasts, or else the reader whose
/// lease ends first.
pub(super) fn holder(leases: &str, fences: &str) -> String {
    format!(
        "{}\nWHERE t.name = $1\nORDER BY 4, 3\nLIMIT 1",
        held(leases, fences)
    )
}

/// Whether the token `$2` holds the name `$1`: one row, `(true)`, when it
/// is the writer's or one reader's, and its lease lasts; none otherwise.
/// The name's row alone, by its primary key.
pub(super) fn held_by(leases: &str) -> String {
    format!(
        "WITH c AS MATERIALIZED (SELECT clock_timestamp() AS now)
SELECT true FROM {leases} AS t, c
WHERE t.name = $1
  AND ((t.token = $2 AND t.expires_at > c.now)
       OR EXISTS (SELECT FROM unnest(t.reader_tokens, t.reader_expiries) AS r(token, expires_at)
                  WHERE r.token = $2 AND r.expires_at > c.now))"
    )
}

/// Every live lease whose name starts with `$1`: `(name, token, remaining
/// microseconds, reader)`, one per writer and one per reader. One
/// statement, so one consistent snapshot of the table.
pub(super) fn list(leases: &str, fences: &str) -> String {
    format!(
        "{}\nWHERE starts_with(t.name, $1)",
        held(leases, fences)
    )
}

/// The live leases of the rows `t` a `WHERE` then picks: `(name, token,
/// remaining microseconds, reader, fence)`. A writer of a fenced name
/// shows the name's last fencing token: its own when the name is only
/// ever taken fenced, as an election's is.
fn held(leases: &str, fences: &str) -> String {
    format!(
        "WITH c AS MATERIALIZED (SELECT clock_timestamp() AS now)
SELECT t.name, held.token, held.remaining, held.reader,
       CASE WHEN NOT held.reader THEN (SELECT f.fence FROM {fences} AS f WHERE f.name = t.name) END
FROM {leases} AS t, c, LATERAL (
    SELECT t.token, {writer} AS remaining, false AS reader WHERE t.expires_at > c.now
    UNION ALL
    SELECT r.token, {reader}, true
    FROM unnest(t.reader_tokens, t.reader_expiries) AS r(token, expires_at)
    WHERE r.expires_at > c.now) AS held",
        writer = micros_until("t.expires_at"),
        reader = micros_until("r.expires_at"),
    )
}

/// Deletes up to 1,000 rows whose writer's lease has ended (their holders
/// died or kept their claims, or readers left them behind), with no live
/// reader and no waiting writer's intent: nothing is lost, since an acquire would overwrite
/// such a row anyway. Rows another session is touching are skipped, not
/// waited for.
pub(super) fn sweep(leases: &str) -> String {
    let readers = live_readers(leases, "clock_timestamp()");
    format!(
        "DELETE FROM {leases} WHERE ctid IN (
    SELECT ctid FROM {leases}
    WHERE expires_at < clock_timestamp()
      AND NOT coalesce(writer_waits_until > clock_timestamp(), false)
      AND NOT {readers}
    LIMIT 1000
    FOR UPDATE SKIP LOCKED)"
    )
}

/// `name` as a quoted SQL identifier, or an error saying what is allowed:
/// letters, digits and `_`, not starting with a digit, at most 63 bytes.
pub(super) fn identifier(name: &str) -> Result<String, String> {
    let valid = !name.is_empty()
        && name.len() <= 63
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !name.as_bytes()[0].is_ascii_digit();
    if valid {
        Ok(format!("\"{name}\""))
    } else {
        Err(format!(
            "{name:?} is not a plain SQL identifier: use letters, digits and `_`, not starting with a digit, at most 63 bytes"
        ))
    }
}

/// `name`, whatever it holds, as a quoted SQL identifier (its `"` doubled):
/// for names the server gave, such as `current_schema()`.
pub(super) fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Table and schema names go into statements as identifiers: anything
    // but a plain one is refused, so nothing can be injected through them.
    #[test]
    fn only_plain_identifiers_are_accepted_and_they_are_quoted() {
        assert_eq!(identifier("lock_leases").as_deref(), Ok("\"lock_leases\""));
        for bad in [
            "",
            "1leases",
            "leases; DROP TABLE x",
            "le\"ases",
            &"x".repeat(64),
        ] {
            assert!(identifier(bad).is_err(), "{bad:?}");
        }
    }

    // A schema the server names may hold anything, quotes included: it
    // must come out as one identifier.
    #[test]
    fn any_name_is_quoted_as_one_identifier() {
        assert_eq!(quoted("public"), "\"public\"");
        assert_eq!(quoted("My \"odd\" schema"), "\"My \"\"odd\"\" schema\"");
    }
}
