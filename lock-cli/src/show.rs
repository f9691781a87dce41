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

/// The permit a name stands for, when it is one of a semaphore's: the
/// semaphore's name and the permit's number, from 1. A semaphore of `n`
/// holds its own name (permit 1) and `name#permit-1` to `name#permit-<n-1>`
/// (permits 2 to `n`).
fn permit_of<'a>(name: &'a str, held: &[(String, Holder)]) -> Option<(&'a str, u64)> {
    if let Some((semaphore, slot)) = name.rsplit_once("#permit-")
        && !slot.is_empty()
        && slot.bytes().all(|b| b.is_ascii_digit())
    {
        return Some((semaphore, slot.parse::<u64>().ok()?.checked_add(1)?));
    }
    // The first permit is the name itself: a semaphore's only when another
    // of its permits is held too (alone, it reads as the plain lock it is
    // indistinguishable from).
    let first = format!("{name}#permit-");
    held.iter()
        .any(|(other, _)| other.starts_with(&first) && permit_of(other, &[]).is_some())
        .then_some((name, 1))
}

/// The lines of `locks list`: a header, then one row per lock, then the
/// notes the rows need: which rows are one semaphore's permits.
pub(crate) fn table(held: &[(String, Holder)]) -> String {
    let rows: Vec<[String; 5]> = held
        .iter()
        .map(|(name, holder)| {
            let mode = match permit_of(name, held) {
                Some((_, permit)) => format!("permit {permit}"),
                None => mode(holder).to_owned(),
            };
            [
                printable(name).into_owned(),
                printable(holder.owner()).into_owned(),
                mode,
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
    for note in notes(held) {
        let _ = writeln!(out, "{note}");
    }
    out
}

/// What the table's rows cannot say by themselves.
fn notes(held: &[(String, Holder)]) -> Vec<String> {
    let mut notes = Vec::new();
    let mut semaphores: Vec<(&str, Vec<&str>)> = Vec::new();
    for (name, _) in held {
        if let Some((semaphore, _)) = permit_of(name, held) {
            match semaphores.iter_mut().find(|(known, _)| *known == semaphore) {
                Some((_, names)) => names.push(name),
                None => semaphores.push((semaphore, vec![name])),
            }
        }
    }
    for (semaphore, names) in semaphores {
        let names: Vec<_> = names.iter().map(|name| printable(name)).collect();
        notes.push(format!(
            "{}: a semaphore, {} permits held ({})",
            printable(semaphore),
            names.len(),
            names.join(", ")
        ));
    }
    notes
}

/// Which side of its name a holder holds: `read` for one of its readers,
/// `write` for its writer (a plain lock's holder).
pub(crate) fn mode(holder: &Holder) -> &'static str {
    if holder.is_reader() { "read" } else { "write" }
}

/// One lock as JSON: `name`, `holder` (`host:pid`), `mode` (`read`,
/// `write`, or `permit` for a semaphore's extra permit, `name#permit-<i>`,
/// with `semaphore` and `permit` its name and number, from 1),
/// `remaining_ms` (`null` for no expiry), `fence` (`null` when unknown).
pub(crate) fn json_of(name: &str, holder: &Holder) -> Value {
    let remaining = holder.remaining_ttl();
    let mut shown = json!({
        "name": name,
        "holder": holder.owner(),
        "mode": mode(holder),
        "remaining_ms": (remaining != Duration::MAX).then_some(remaining.as_millis() as u64),
        "fence": holder.fence(),
    });
    if let Some((semaphore, permit)) = permit_of(name, &[]) {
        shown["mode"] = "permit".into();
        shown["semaphore"] = semaphore.into();
        shown["permit"] = permit.into();
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    // A semaphore of two holds its name and `name#permit-1`: listed as two
    // write locks they read as two locks, with no sign that they are the
    // permits of one semaphore.
    #[test]
    fn a_semaphores_permits_are_listed_as_its_permits() {
        let holder = || {
            Holder::new(
                "0123456789abcdef0123456789abcdef@web-1:1",
                Duration::from_secs(5),
            )
        };
        let held = vec![
            ("exports".to_owned(), holder()),
            ("exports#permit-1".to_owned(), holder()),
            ("reports".to_owned(), holder()),
        ];
        let table = table(&held);
        let line = |name: &str| {
            table
                .lines()
                .find(|line| line.split_whitespace().next() == Some(name))
                .unwrap_or_else(|| panic!("no row for {name}: {table}"))
                .to_owned()
        };
        assert!(line("exports").contains("permit 1"), "{table}");
        assert!(line("exports#permit-1").contains("permit 2"), "{table}");
        assert!(line("reports").contains("write"), "{table}");
        assert!(
            table.contains("exports: a semaphore, 2 permits held"),
            "a note says which rows are one semaphore: {table}"
        );
        let json = json_of("exports#permit-1", &held[1].1);
        assert_eq!(json["semaphore"], "exports", "{json}");
        assert_eq!(json["permit"], 2, "{json}");
        assert_eq!(json["mode"], "permit", "{json}");
    }

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
