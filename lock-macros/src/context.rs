//! Where a `#[locked]` function sits, read from its source file.
//!
//! An attribute sees only the item it is on, not the `impl` or `trait`
//! around it, and rustc's own errors for a rewritten trait method name no
//! fix. So when the compiler reports where the function is (Rust 1.88 and
//! later), the attribute reads the file there and finds the block that
//! encloses it. Anything it cannot read for certain (a file it cannot open,
//! text that does not show `fn <name>` at the reported place, code written
//! by another macro) counts as unknown, and the function is expanded as
//! usual: this only ever replaces a worse error by a better one.

use proc_macro2::Span;

/// The block a function's text sits directly in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Enclosing {
    /// `impl Trait for Type { ... }`.
    TraitImpl,
    /// `trait Trait { ... }`: a provided method.
    TraitDefinition,
    /// A module, an inherent impl, a function body: anything else.
    Other,
}

/// What encloses the function named `name` at `span` (its name's span), or
/// `None` when that cannot be read for certain.
pub(crate) fn enclosing(span: Span, name: &str) -> Option<Enclosing> {
    if !proc_macro::is_available() {
        return None;
    }
    let file = span.local_file()?;
    let start = span.start();
    // Line 0: the compiler does not say where (before Rust 1.88).
    if start.line == 0 {
        return None;
    }
    let text = std::fs::read_to_string(file).ok()?;
    enclosing_in(&text, start.line, start.column, name)
}

/// What encloses `fn <name>` whose name starts at `line` (1-based) and
/// `column` (0-based, in characters) of `text`.
pub(crate) fn enclosing_in(
    text: &str,
    line: usize,
    column: usize,
    name: &str,
) -> Option<Enclosing> {
    let line_start = match line {
        0 => return None,
        1 => 0,
        _ => text.match_indices('\n').nth(line - 2)?.0 + 1,
    };
    let offset = line_start
        + text[line_start..]
            .char_indices()
            .nth(column)
            .map(|(at, _)| at)?;
    // The reported place must be this function's name, after `fn`.
    let at_name = text[offset..].strip_prefix(name)?;
    if at_name.starts_with(is_ident) {
        return None;
    }
    let before = text[..offset].trim_end().strip_suffix("fn")?;
    if before.ends_with(is_ident) {
        return None;
    }
    let header = innermost_block_header(&text[..offset])?;
    Some(classify(header))
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The text before the `{` of the innermost block still open at the end of
/// `prefix`, from the end of the previous item or statement; `None` at the
/// top level of the file or when `prefix` cannot be read (an unterminated
/// comment or literal, an unmatched `}`).
fn innermost_block_header(prefix: &str) -> Option<&str> {
    let bytes = prefix.as_bytes();
    let mut open: Vec<(usize, usize)> = Vec::new();
    let mut header_start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let next = bytes.get(i + 1).copied();
        // A header is read from after the last comment or literal in it:
        // their words are not the header's (a comment saying "impl X for
        // Y" must not make an inherent impl a trait impl). What is cut
        // away is at most an attribute or a doc comment.
        match bytes[i] {
            b'/' if next == Some(b'/') => {
                i = prefix[i..].find('\n').map_or(bytes.len(), |end| i + end);
                header_start = i;
            }
            b'/' if next == Some(b'*') => {
                i = after_block_comment(bytes, i)?;
                header_start = i;
            }
            b'"' => {
                i = after_string(bytes, i + 1)?;
                header_start = i;
            }
            b'r' if starts_raw_string(bytes, i) => {
                i = after_raw_string(bytes, i + 1)?;
                header_start = i;
            }
            b'\'' => {
                let end = after_quote(prefix, i)?;
                if end > i + 1 {
                    header_start = end;
                }
                i = end;
            }
            b'{' => {
                open.push((header_start, i));
                header_start = i + 1;
                i += 1;
            }
            b'}' => {
                open.pop()?;
                header_start = i + 1;
                i += 1;
            }
            b';' => {
                header_start = i + 1;
                i += 1;
            }
            _ => i += 1,
        }
    }
    let (start, brace) = open.pop()?;
    Some(&prefix[start..brace])
}

/// Past a `/* */` comment (nested ones included) opening at `i`.
fn after_block_comment(bytes: &[u8], mut i: usize) -> Option<usize> {
    let mut depth = 0usize;
    while i + 1 < bytes.len() {
        match (bytes[i], bytes[i + 1]) {
            (b'/', b'*') => {
                depth += 1;
                i += 2;
            }
            (b'*', b'/') => {
                depth -= 1;
                i += 2;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => i += 1,
        }
    }
    None
}

/// Past a `"` string whose text starts at `i`.
fn after_string(bytes: &[u8], mut i: usize) -> Option<usize> {
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// Whether the `r` at `i` opens a raw string (`r"`, `r#"`, `br"`, `cr#"`),
/// not an identifier or a raw identifier (`r#type`).
fn starts_raw_string(bytes: &[u8], i: usize) -> bool {
    let word_start = match i.checked_sub(1).map(|before| bytes[before]) {
        Some(b'b' | b'c') => i - 1,
        _ => i,
    };
    let in_word = word_start
        .checked_sub(1)
        .is_some_and(|before| bytes[before].is_ascii_alphanumeric() || bytes[before] == b'_');
    if in_word {
        return false;
    }
    let hashes = bytes[i + 1..].iter().take_while(|&&b| b == b'#').count();
    bytes.get(i + 1 + hashes) == Some(&b'"')
}

/// Past a raw string whose `#`s start at `i`.
fn after_raw_string(bytes: &[u8], i: usize) -> Option<usize> {
    let hashes = bytes[i..].iter().take_while(|&&b| b == b'#').count();
    let mut at = i + hashes + 1;
    while at < bytes.len() {
        let closes = bytes
            .get(at + 1..at + 1 + hashes)
            .is_some_and(|after| after.iter().all(|&b| b == b'#'));
        if bytes[at] == b'"' && closes {
            return Some(at + 1 + hashes);
        }
        at += 1;
    }
    None
}

/// Past the `'` at `i`: a whole character literal, or the quote alone when it
/// starts a lifetime or a label.
fn after_quote(text: &str, i: usize) -> Option<usize> {
    let rest = &text[i + 1..];
    if rest.starts_with('\\') {
        // An escape: `'\''`, `'\n'`, `'\u{7b}'`.
        let close = rest.get(2..)?.find('\'')?;
        return Some(i + 1 + 2 + close + 1);
    }
    let c = rest.chars().next()?;
    if rest[c.len_utf8()..].starts_with('\'') {
        return Some(i + 1 + c.len_utf8() + 1);
    }
    Some(i + 1)
}

/// What a block's header makes it.
fn classify(header: &str) -> Enclosing {
    let header = without_attributes(header);
    let first = header.split(|c: char| !is_ident(c)).find(|word| {
        !word.is_empty()
            && !matches!(
                *word,
                "pub" | "crate" | "super" | "self" | "in" | "unsafe" | "default" | "auto"
            )
    });
    match first {
        Some("trait") => Enclosing::TraitDefinition,
        Some("impl") if names_a_trait(header) => Enclosing::TraitImpl,
        _ => Enclosing::Other,
    }
}

/// `header` without its `#[...]` attributes.
fn without_attributes(header: &str) -> &str {
    let mut rest = header.trim_start();
    while let Some(after) = rest.strip_prefix('#') {
        let after = after
            .trim_start()
            .strip_prefix('!')
            .unwrap_or(after)
            .trim_start();
        let Some(inside) = after.strip_prefix('[') else {
            return rest;
        };
        let mut depth = 1usize;
        let mut end = None;
        for (at, c) in inside.char_indices() {
            match c {
                '[' => depth += 1,
                ']' => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(at);
                        break;
                    }
                }
                _ => {}
            }
        }
        let Some(end) = end else {
            return rest;
        };
        rest = inside[end + 1..].trim_start();
    }
    rest
}

/// Whether an `impl` header implements a trait: a `for` that is not a
/// higher-ranked bound (`for<'a>`).
fn names_a_trait(header: &str) -> bool {
    header.match_indices("for").any(|(at, _)| {
        let before = header[..at].chars().next_back();
        let after = &header[at + 3..];
        !before.is_some_and(is_ident)
            && !after.starts_with(is_ident)
            && !after.trim_start().starts_with('<')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What encloses `fn name` at the place marked `@` in `text`.
    fn at_marker(text: &str, name: &str) -> Option<Enclosing> {
        let offset = text.find('@').expect("a marker");
        let text = text.replacen('@', "", 1);
        let line = text[..offset].matches('\n').count() + 1;
        let line_start = text[..offset].rfind('\n').map_or(0, |at| at + 1);
        let column = text[line_start..offset].chars().count();
        enclosing_in(&text, line, column, name)
    }

    #[test]
    fn a_method_of_a_trait_impl() {
        let text = "struct A;\nimpl<T> Job<T> for A where T: Send {\n    #[locked]\n    async fn @run(&self) {}\n}\n";
        assert_eq!(at_marker(text, "run"), Some(Enclosing::TraitImpl));
        let text = "#[async_trait::async_trait]\nunsafe impl Job for A {\n    fn @run() {}\n}";
        assert_eq!(at_marker(text, "run"), Some(Enclosing::TraitImpl));
    }

    #[test]
    fn a_provided_method_of_a_trait() {
        let text = "pub(crate) trait Job: Send {\n    async fn @run(&self) -> u32 { 1 }\n}";
        assert_eq!(at_marker(text, "run"), Some(Enclosing::TraitDefinition));
    }

    #[test]
    fn inherent_methods_free_functions_and_nested_ones_are_other() {
        for text in [
            "impl A {\n    async fn @run(&self) {}\n}",
            "impl<F> A<F> where F: for<'a> Fn(&'a str) -> u8 {\n    async fn @run(&self) {}\n}",
            "impl A<{ N }> {\n    async fn @run(&self) {}\n}",
            "mod jobs {\n    pub async fn @run() {}\n}",
            "impl Job for A {\n    fn outer(&self) {\n        async fn @run() {}\n    }\n}",
            "impl Job for A {}\nimpl A {\n    async fn @run() {}\n}",
            "impl A {\n    // impl Job for A {\n    async fn @run() {}\n}",
            "/// The impl for A\nimpl A {\n    async fn @run() {}\n}",
            "#[doc = \"] impl Job for A\"]\nimpl A {\n    async fn @run() {}\n}",
        ] {
            assert_eq!(at_marker(text, "run"), Some(Enclosing::Other), "{text}");
        }
    }

    #[test]
    fn literals_and_comments_hide_their_braces() {
        let text = r####"impl Job for A {
    const S: &str = "{ \" {";
    const R: &str = r##"{ "# }"##;
    const C: char = '{';
    const E: char = '\'';
    /* { /* nested } */ { */
    fn f<'a>(x: &'a str) -> &'a str { x }
    async fn @run() {}
}"####;
        assert_eq!(at_marker(text, "run"), Some(Enclosing::TraitImpl));
    }

    #[test]
    fn every_function_of_this_crate_is_read_without_a_panic() {
        let sources = [
            include_str!("args.rs"),
            include_str!("context.rs"),
            include_str!("duration.rs"),
            include_str!("expand.rs"),
            include_str!("lib.rs"),
            include_str!("template.rs"),
            include_str!("validate.rs"),
        ];
        let mut seen = [0usize; 4];
        for text in sources {
            for (line, row) in text.lines().enumerate() {
                for (column, _) in row.char_indices() {
                    let Some(name) = row[column..].split(|c: char| !is_ident(c)).next() else {
                        continue;
                    };
                    let column = row[..column].chars().count();
                    let found = enclosing_in(text, line + 1, column, name);
                    seen[match found {
                        None => 0,
                        Some(Enclosing::TraitImpl) => 1,
                        Some(Enclosing::TraitDefinition) => 2,
                        Some(Enclosing::Other) => 3,
                    }] += 1;
                }
            }
        }
        // Functions at the top level, in impls of traits (`Parse`,
        // `VisitMut`...) and in modules and inherent impls; none in a trait.
        assert!(seen[0] > 0 && seen[1] > 0 && seen[3] > 0, "{seen:?}");
        assert_eq!(seen[2], 0, "{seen:?}");
    }

    #[test]
    fn anything_unread_is_unknown() {
        // At the top level of a file: nothing encloses it.
        assert_eq!(at_marker("async fn @run() {}", "run"), None);
        // The place does not show `fn run`.
        assert_eq!(
            at_marker("impl Job for A {\n    fn @running() {}\n}", "run"),
            None
        );
        assert_eq!(
            at_marker("impl Job for A {\n    let @run = 1;\n}", "run"),
            None
        );
        // Past the end of the text, or no line at all.
        assert_eq!(enclosing_in("impl A {}", 9, 0, "run"), None);
        assert_eq!(enclosing_in("impl A {}", 0, 0, "run"), None);
        assert_eq!(enclosing_in("impl A {}", 1, 40, "run"), None);
        // An unterminated comment before it.
        assert_eq!(at_marker("/* impl A {\n    fn @run() {}", "run"), None);
    }
}
