//! The `#[locked]` attribute's durations (`ttl = "10m"`) and name
//! templates (`name = "reports:{tenant}"`).
//!
//! Both parsers live in the proc-macro crate, which cannot be linked into
//! a fuzz target or called from this crate; they are plain functions of a
//! string with no dependency, so their files are compiled here as they
//! are, for the tests and the fuzz targets only.

use std::time::Duration;

#[allow(dead_code, unreachable_pub)]
#[path = "../../../lock-macros/src/duration.rs"]
mod duration;
#[allow(dead_code, unreachable_pub)]
#[path = "../../../lock-macros/src/template.rs"]
mod template;

use self::template::Piece;

/// The duration parser on any text: no panic; a duration read is the sum
/// of its groups, so it reads the same with a `0s` group added, one
/// nanosecond more with `1ns` added (or is refused as too long only at
/// the largest duration), and the same again written as seconds and
/// nanoseconds.
pub fn check_duration(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let Ok(read) = duration::parse(&text) else {
        return;
    };
    assert_eq!(
        duration::parse(&format!("{text} 0s")),
        Ok(read),
        "{text:?} and a zero group"
    );
    match duration::parse(&format!("{text} 1ns")) {
        Ok(more) => assert_eq!(
            Some(more),
            read.checked_add(Duration::from_nanos(1)),
            "{text:?} and one nanosecond"
        ),
        Err(why) => assert!(
            read == Duration::MAX && why.contains("too long"),
            "{text:?} ({read:?}) and one nanosecond is refused: {why}"
        ),
    }
    let canonical = format!("{}s {}ns", read.as_secs(), read.subsec_nanos());
    assert_eq!(
        duration::parse(&canonical),
        Ok(read),
        "{text:?} written as {canonical:?}"
    );
}

/// The name template parser on any text: no panic; a template read has
/// no empty or adjacent text pieces, and written back (braces doubled,
/// placeholders as `{root.field}`) reads as the same pieces; it has a
/// literal name exactly when it has no placeholder, and that name is its
/// text.
pub fn check_template(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let Ok(pieces) = template::parse(&text) else {
        return;
    };
    for pair in pieces.windows(2) {
        assert!(
            !matches!(pair, [Piece::Text(_), Piece::Text(_)]),
            "{text:?}: two text pieces in a row: {pieces:?}"
        );
    }
    let mut written = String::new();
    let mut literal = Some(String::new());
    for piece in &pieces {
        match piece {
            Piece::Text(part) => {
                assert!(!part.is_empty(), "{text:?}: an empty text piece");
                written.push_str(&part.replace('{', "{{").replace('}', "}}"));
                if let Some(name) = literal.as_mut() {
                    name.push_str(part);
                }
            }
            Piece::Field { root, fields } => {
                written.push('{');
                written.push_str(root);
                for field in fields {
                    written.push('.');
                    written.push_str(field);
                }
                written.push('}');
                literal = None;
            }
        }
    }
    assert_eq!(
        template::parse(&written).as_ref(),
        Ok(&pieces),
        "{text:?} written back as {written:?}"
    );
    assert_eq!(
        template::literal(&pieces),
        literal,
        "{text:?}: the literal name"
    );
}
