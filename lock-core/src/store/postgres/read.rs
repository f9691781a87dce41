//! The read side of a name: a reader's acquire.
//!
//! Readers live in their name's row, beside the writer (see
//! [`create_tables`](super::sql::create_tables)): one token and one expiry
//! each, at the same place in `reader_tokens` and `reader_expiries`. So
//! every decision about a name (may this writer in, may this reader in, is
//! the last reader gone) is taken in one statement on one row, locked by
//! that statement and read as the last committed statement left it. Were
//! readers rows of their own, a writer's statement checking "no reader"
//! would read them as of its start, and could miss a reader that got in
//! while it waited for the name's row: both would hold the name.
//!
//! Writer preference: a waiting writer held off marks the row
//! `writer_waits_until` (see [`acquire`](super::sql::acquire)), and no new
//! reader gets in while that lasts. A waiting writer renews it each time
//! it tries, and tries at least every
//! [`WRITER_RETRY_MICROS`](super::sql::WRITER_RETRY_MICROS) while readers
//! hold it off; it is cleared when a writer takes the name, and taken back
//! ([`withdraw`], see [`intent`](super::intent)) by a writer that stops
//! waiting without it. A writer that
//! died holds readers off for [`WRITER_INTENT`](super::sql::WRITER_INTENT)
//! after its last attempt, no longer.


/// A reader's acquire, as one `INSERT ... ON CONFLICT DO UPDATE`; with
/// `waiting`, a held name is marked as waited for.
///
/// Parameters: `$1` name, `$2` token, `$3` holder (unused: a reader's
/// owner is in its token), `$4` ttl in microseconds. The reader gets in
/// when no writer's lease lasts and no writer's intent does; it joins the
/// live readers then, and readers whose leases ended are dropped from the
/// arrays. The row it gets in keeps no writer (its token and holder
/// emptied, its lease ending as the reader gets in), as a row a reader
/// makes: a writer whose lease ran out has nothing left in it for a late
/// release or renewal to match. Such a call, whose statement read the
/// clock before that lease ended and then waited for the row, would
/// otherwise still find the lease live by its clock, and delete the row
/// with the readers in it, or renew the writer beside them.
///
/// Otherwise, for a waiting caller, the row is marked as waited for until
/// just after what holds it off ends (the writer's lease or its intent),
/// so the release that ends it sends a `NOTIFY`. Returns one row,
/// `(acquired, NULL, remaining microseconds of what holds it off)`, or none
/// for a held name and a caller that does not wait.
pub(super) fn acquire(leases: &str, waiting: bool) -> String {
    let now = "EXCLUDED.acquired_at";
    let open = format!(
        "t.expires_at <= {now} AND NOT coalesce(t.writer_waits_until > {now}, false)"
    );
    // The live readers, in order, then the new one.
    let live = |column: &str, new: &str| {
        format!(
            "ARRAY(SELECT r.{column}
            FROM unnest(t.reader_tokens, t.reader_expiries) WITH ORDINALITY AS r(token, expires_at, i)
            WHERE r.expires_at > {now} ORDER BY r.i) || EXCLUDED.{new}"
        )
    };
    let (tokens, expiries) = (
        live("token", "reader_tokens"),
        live("expires_at", "reader_expiries"),
    );
    // The writer's columns, as the reader takes the row: no writer.
    let no_writer = |column: &str, value: &str| {
        format!("{column} = CASE WHEN {open} THEN {value} ELSE t.{column} END")
    };
    let update = if waiting {
        format!(
            "reader_tokens   = CASE WHEN {open} THEN {tokens} ELSE t.reader_tokens END,
        reader_expiries = CASE WHEN {open} THEN {expiries} ELSE t.reader_expiries END,
        {token}, {holder}, {acquired_at}, {expires_at},
        waited_until    = CASE WHEN {open} THEN t.waited_until
                               ELSE GREATEST(t.waited_until,
                                             GREATEST(t.expires_at, t.writer_waits_until)
                                                 + interval '250 milliseconds') END",
            token = no_writer("token", "''"),
            holder = no_writer("holder", "''"),
            acquired_at = no_writer("acquired_at", now),
            expires_at = no_writer("expires_at", now),
        )
    } else {
        format!(
            "reader_tokens = {tokens}, reader_expiries = {expiries},
        token = '', holder = '', acquired_at = {now}, expires_at = {now}
    WHERE {open}"
        )
    };
    format!(
        "WITH c AS MATERIALIZED (SELECT clock_timestamp() AS now),
lease AS (
    INSERT INTO {leases} AS t (name, token, holder, acquired_at, expires_at, reader_tokens, reader_expiries)
    SELECT $1, '', '', c.now, c.now, ARRAY[$2::text], ARRAY[c.now + $4 * interval '1 microsecond'] FROM c
    ON CONFLICT (name) DO UPDATE SET
        {update}
    RETURNING coalesce($2 = ANY(t.reader_tokens), false) AS acquired,
              GREATEST(t.expires_at, t.writer_waits_until) AS blocked_until)
SELECT lease.acquired, NULL::bigint, {left}
FROM lease",
        left = "(extract(epoch FROM lease.blocked_until - clock_timestamp()) * 1000000)::bigint",
    )
}

/// A waiting writer that stopped waiting without the name takes back its
/// intent, as one `UPDATE`: `$1` name, `$2` the intent its last attempt
/// left (see [`acquire`](super::sql::acquire)), `$3` the notification
/// channel, `$4` its payload. The intent is cleared only while it is still
/// that one (no later attempt of any writer moved it on, so no later
/// intent is cut short); then, when no writer's lease lasts and someone
/// waits, the readers are told, as a release tells them: they may get in.
/// Returns a row when the intent was cleared.
pub(super) fn withdraw(leases: &str) -> String {
    format!(
        "WITH c AS MATERIALIZED (SELECT clock_timestamp() AS now)
UPDATE {leases} AS t SET writer_waits_until = NULL
FROM c
WHERE t.name = $1 AND t.writer_waits_until = $2
RETURNING CASE WHEN t.expires_at <= c.now AND t.waited_until > c.now
               THEN pg_notify($3, $4) IS NULL END"
    )
}
