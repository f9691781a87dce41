//! How held locks are shown: an aligned table for people, JSON for scripts.
//! The owner token is never shown: it is the proof of ownership.
//!
//! Names, holders and labels are whatever was written to the store's keys,
//! by anyone who can write there: every one goes through [`printable`]
//! before it reaches a terminal, so none can clear the screen, retitle the
//! window or hide a row with escape sequences. JSON carries them exactly,
//! escaped the JSON way.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::time::Duration;

use lock_core::Holder;
use serde_json::{Value, json};

/// `text` as a terminal can show it: every control character (C0, DEL,
/// C1), line and paragraph separator and invisible formatting character
/// (zero-width, direction overrides, tags) is written as Rust writes it in
/// a string, `\u{1b}`, with `\t`, `\n` and `\r` for those three; a
/// backslash is doubled, so escaped text never reads as an escape.
/// Everything else, accents and other scripts included, is left as it is.
pub(crate) fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| c == '\\' || hidden(c)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if hidden(c) => {
                let _ = write!(out, "{}", c.escape_unicode());
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Whether a terminal would act on `c`, or show nothing for it, rather
/// than print it: controls, line and paragraph separators, and the
/// invisible formatting characters of Unicode's `Cf` category (listed here
/// rather than taken from a Unicode table crate).
fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{ad}'
                | '\u{600}'..='\u{605}'
                | '\u{61c}'
                | '\u{6dd}'
                | '\u{70f}'
                | '\u{180e}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{206f}'
                | '\u{feff}'
                | '\u{fff9}'..='\u{fffb}'
                | '\u{e0000}'..='\u{e007f}'
        )
}

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
                printable(name).into_owned(),
                printable(holder.owner()).into_owned(),
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

    // Names and owners are whatever was written to the store's keys: anyone
    // who can write a key could otherwise clear the operator's screen,
    // retitle the terminal or hide a row with escape sequences.
    #[test]
    fn the_table_shows_control_characters_from_the_store_escaped_never_raw() {
        let held = vec![(
            "evil\u{1b}[2J\u{7}name".to_owned(),
            Holder::new(
                "0123456789abcdef0123456789abcdef@\u{1b}]0;owned\u{7}web-1:1\u{202e}\r",
                Duration::from_secs(5),
            ),
        )];
        let table = table(&held);
        assert!(
            !table
                .chars()
                .any(|c| c != '\n' && (c.is_control() || c == '\u{202e}')),
            "no control or direction-changing character reaches the terminal: {table:?}"
        );
        assert!(
            table.contains(r"evil\u{1b}[2J\u{7}name"),
            "the name is shown with its control characters escaped: {table:?}"
        );
        assert!(
            table.contains(r"\u{1b}]0;owned\u{7}web-1:1\u{202e}\r"),
            "the holder is shown with its control characters escaped: {table:?}"
        );
        let json = json_of(&held[0].0, &held[0].1);
        assert_eq!(
            json["name"], "evil\u{1b}[2J\u{7}name",
            "JSON carries the name exactly, escaped the JSON way"
        );
        assert_eq!(
            json["holder"], "\u{1b}]0;owned\u{7}web-1:1\u{202e}\r",
            "JSON carries the holder exactly, escaped the JSON way"
        );
        assert!(
            !json.to_string().chars().any(char::is_control),
            "serialised JSON holds no raw control character: {json}"
        );
    }

    #[test]
    fn printable_text_is_left_as_it_is_and_the_rest_is_escaped_unambiguously() {
        assert_eq!(
            printable("reports:acme web-1:4242 é 日本"),
            "reports:acme web-1:4242 é 日本",
            "printable text, accents and CJK included, is unchanged"
        );
        assert_eq!(
            printable("a\tb\nc\u{0}d\u{9b}e\u{200b}f"),
            r"a\tb\nc\u{0}d\u{9b}e\u{200b}f",
            "tabs, newlines, NUL, C1 controls and zero-width characters are escaped"
        );
        assert_eq!(
            printable(r"a\u{1b}"),
            r"a\\u{1b}",
            "a backslash is doubled, so escaped text never reads as an escape"
        );
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
