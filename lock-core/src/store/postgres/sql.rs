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

/// The statements, with the table's qualified name filled in.
pub(super) struct Statements {
    /// By `[fenced][waiting]`.
    pub(super) acquire: [[String; 2]; 2],
    pub(super) release: String,
    pub(super) extend: String,
    pub(super) holder: String,
    pub(super) list: String,
    pub(super) sweep: String,
}

impl Statements {
    /// Every statement, on the lease table `leases` and the fencing
    /// counters `fences` (both schema-qualified).
    pub(super) fn new(leases: &str, fences: &str) -> Statements {
        Statements {
            acquire: [false, true].map(|fenced| {
                [false, true].map(|waiting| acquire(leases, fences, fenced, waiting))
            }),
            release: release(leases),
            extend: extend(leases),
            holder: holder(leases),
            list: list(leases),
            sweep: sweep(leases),
        }
    }
}

/// The lease table and the fencing counters, for `CREATE ... IF NOT
/// EXISTS` and the README.
///
/// `leases`:
/// - `name`: the store key (manager prefix + lock name);
/// - `token`: the holder's owner token, the proof release and extend check;
/// - `holder`: `host:pid` of the holder, for operators;
/// - `acquired_at`, `expires_at`: the lease, on the database's clock; the
///   name is free once `expires_at` has passed;
/// - `waited_until`: someone waits for this name until then, so a release
///   before it must `NOTIFY`.
///
/// `fences`: the last fencing token handed out for `name`.
pub(super) fn create_tables(leases: &str, fences: &str, sweep_index: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {leases} (
    name          text        PRIMARY KEY,
    token         text        NOT NULL,
    holder        text        NOT NULL,
    acquired_at   timestamptz NOT NULL,
    expires_at    timestamptz NOT NULL,
    waited_until  timestamptz
);
CREATE INDEX IF NOT EXISTS {sweep_index} ON {leases} (expires_at);
CREATE TABLE IF NOT EXISTS {fences} (
    name   text   PRIMARY KEY,
    fence  bigint NOT NULL
);"
    )
}

/// Acquire, as one `INSERT ... ON CONFLICT DO UPDATE`, in one of four
/// shapes so each caller pays only for what it asked: `waiting` adds the
/// marking of a held row (and the holder's remaining TTL); `fenced` takes
/// the next value of the name's counter in the same statement when the
/// acquire wins.
///
/// Parameters: `$1` name, `$2` token, `$3` holder, `$4` ttl in
/// microseconds. The row is taken when it is absent or its lease has
/// expired; otherwise, for a waiting caller, it is marked as waited for
/// until just after the holder's expiry. Returns one row, `(acquired, fence
/// or NULL, holder's remaining microseconds)`, or none for a held name and
/// a caller that does not wait (nothing is written then).
pub(super) fn acquire(leases: &str, fences: &str, fenced: bool, waiting: bool) -> String {
    let free = "t.expires_at <= EXCLUDED.acquired_at";
    let update = if waiting {
        format!(
            "token        = CASE WHEN {free} THEN EXCLUDED.token ELSE t.token END,
        holder       = CASE WHEN {free} THEN EXCLUDED.holder ELSE t.holder END,
        acquired_at  = CASE WHEN {free} THEN EXCLUDED.acquired_at ELSE t.acquired_at END,
        expires_at   = CASE WHEN {free} THEN EXCLUDED.expires_at ELSE t.expires_at END,
        waited_until = CASE WHEN {free} THEN t.waited_until
                            ELSE GREATEST(t.waited_until, t.expires_at + interval '250 milliseconds') END"
        )
    } else {
        format!(
            "token = EXCLUDED.token, holder = EXCLUDED.holder,
        acquired_at = EXCLUDED.acquired_at, expires_at = EXCLUDED.expires_at
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
    RETURNING f.fence)"
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
    RETURNING t.token = $2 AS acquired, t.expires_at){fence_cte}
SELECT lease.acquired,
       {fence},
       (extract(epoch FROM lease.expires_at - clock_timestamp()) * 1000000)::bigint
FROM lease"
    )
}

/// Release (or force-release), as one compare-and-delete, with a `NOTIFY`
/// when someone waits.
///
/// Parameters: `$1` name, `$2` token (`NULL`: whoever holds it), `$3` the
/// notification channel, `$4` the notification payload. Returns one row
/// when a live lease was deleted, none otherwise.
pub(super) fn release(leases: &str) -> String {
    format!(
        "DELETE FROM {leases}
WHERE name = $1 AND ($2::text IS NULL OR token = $2) AND expires_at > clock_timestamp()
RETURNING CASE WHEN waited_until > clock_timestamp() THEN pg_notify($3, $4) IS NULL END"
    )
}

/// Extend, as one compare-and-update of `expires_at`: `$1` name, `$2`
/// token, `$3` ttl in microseconds. Returns a row when it was ours.
pub(super) fn extend(leases: &str) -> String {
    format!(
        "WITH c AS MATERIALIZED (SELECT clock_timestamp() AS now)
UPDATE {leases} AS t SET expires_at = c.now + $3 * interval '1 microsecond'
FROM c
WHERE t.name = $1 AND t.token = $2 AND t.expires_at > c.now
RETURNING 1"
    )
}

/// The holder of `$1`: `(token, remaining microseconds)` while its lease
/// lasts.
pub(super) fn holder(leases: &str) -> String {
    format!(
        "SELECT token,
       (extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint
FROM {leases}
WHERE name = $1 AND expires_at > clock_timestamp()"
    )
}

/// Every live lease whose name starts with `$1`: `(name, token, remaining
/// microseconds)`. One statement, so one consistent snapshot of the table.
pub(super) fn list(leases: &str) -> String {
    format!(
        "SELECT name, token,
       (extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint
FROM {leases}
WHERE starts_with(name, $1) AND expires_at > clock_timestamp()"
    )
}

/// Deletes up to 1,000 rows whose lease has ended (their holders died or
/// kept their claims): nothing is lost, since an acquire would overwrite
/// such a row anyway. Rows another session is touching are skipped, not
/// waited for.
pub(super) fn sweep(leases: &str) -> String {
    format!(
        "DELETE FROM {leases} WHERE ctid IN (
    SELECT ctid FROM {leases}
    WHERE expires_at < clock_timestamp()
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
