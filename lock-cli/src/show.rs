//! How held locks are shown: an aligned table for people, JSON for scripts.
//! The owner token is never shown: it is the proof of ownership.

use std::fmt::Write as _;
use std::time::Duration;

use lock_core::Holder;
use serde_json::{Value, json};

/// A remaining TTL as people read it: `850ms`, `12.5s`, `9m 58s`, `2h 05m`.
pub(crate) fn remaining(duration: Duration) -> String {
    if duration == Duration::MAX {
        return "no expiry".to_owned();
    }
    let millis = duration.as_millis();
    let seconds = duration.as_secs();
    match seconds {
        0 => format!("{millis}ms"),
        1..60 => format!("{:.1}s", duration.as_secs_f64()),
        60..3600 => format!("{}m {:02}s", seconds / 60, seconds % 60),
        _ => format!("{}h {:02}m", seconds / 3600, seconds % 3600 / 60),
    }
}

/// The lines of `locks list`: a header, then one row per lock.
pub(crate) fn table(held: &[(String, Holder)]) -> String {
    let rows: Vec<[String; 5]> = held
        .iter()
        .map(|(name, holder)| {
            [
                name.clone(),
                holder.owner().to_owned(),
                mode(holder).to_owned(),
                remaining(holder.remaining_ttl()),
                holder
                    .fence()
                    .map_or_else(|| "-".to_owned(), |f| f.to_string()),
            ]
        })
        .collect();
    let header = ["NAME", "HOLDER", "MODE", "REMAINING", "FENCE"].map(str::to_owned);
    let mut widths = header.clone().map(|h| h.chars().count());
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let line = format!(
            "{:<w0$}  {:<w1$}  {:<w2$}  {:>w3$}  {:>w4$}",
            row[0],
            row[1],
            row[2],
            row[3],
            row[4],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2],
            w3 = widths[3],
            w4 = widths[4],
        );
        let _ = writeln!(out, "{}", line.trim_end());
    }
    out
}

/// Which side of its name a holder holds: `read` for one of its readers,
/// `write` for its writer (a plain lock's holder).
pub(crate) fn mode(holder: &Holder) -> &'static str {
    if holder.is_reader() { "read" } else { "write" }
}

/// One lock as JSON: `name`, `holder` (`host:pid`), `mode` (`read` or
/// `write`), `remaining_ms` (`null` for no expiry), `fence` (`null` when
/// unknown).
pub(crate) fn json_of(name: &str, holder: &Holder) -> Value {
    let remaining = holder.remaining_ttl();
    json!({
        "name": name,
        "holder": holder.owner(),
        "mode": mode(holder),
        "remaining_ms": (remaining != Duration::MAX).then_some(remaining.as_millis() as u64),
        "fence": holder.fence(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remaining_times_read_naturally() {
        assert_eq!(remaining(Duration::from_millis(850)), "850ms");
        assert_eq!(remaining(Duration::from_millis(12_540)), "12.5s");
        assert_eq!(remaining(Duration::from_secs(598)), "9m 58s");
        assert_eq!(
            remaining(Duration::from_secs(2 * 3600 + 5 * 60 + 9)),
            "2h 05m"
        );
        assert_eq!(remaining(Duration::MAX), "no expiry");
    }

    #[test]
    fn the_table_aligns_its_columns_and_never_shows_the_token() {
        let held = vec![
            (
                "reports:acme".to_owned(),
                Holder::new(
                    "0123456789abcdef0123456789abcdef@web-1:4242",
                    Duration::from_secs(598),
                )
                .with_fence(17),
            ),
            (
                "x".to_owned(),
                Holder::new("someone", Duration::from_millis(900)),
            ),
            (
                "catalog".to_owned(),
                Holder::new("reader", Duration::from_millis(900)).as_reader(),
            ),
        ];
        let table = table(&held);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 4, "{table}");
        assert!(
            lines[1].contains(" write ") && lines[3].contains(" read "),
            "each row says which side it holds: {table}"
        );
        assert!(lines[0].starts_with("NAME          HOLDER"), "{table}");
        assert!(
            lines[1].contains("web-1:4242") && lines[1].ends_with("17"),
            "{table}"
        );
        assert!(lines[2].ends_with('-'), "no fence shows as -: {table}");
        assert!(!table.contains("0123456789abcdef"), "token leaked: {table}");
        let json = json_of(&held[0].0, &held[0].1).to_string();
        assert!(!json.contains("0123456789abcdef"), "token leaked: {json}");
        assert!(json.contains("\"remaining_ms\":598000"), "{json}");
        assert!(json.contains("\"mode\":\"write\""), "{json}");
        let reader = json_of(&held[2].0, &held[2].1).to_string();
        assert!(reader.contains("\"mode\":\"read\""), "{reader}");
    }
}
