//! Lock name templates: `"reports:{tenant}"`, `"job:{job.id}"`, `"{self.shard}"`.
//!
//! Text is kept as is; `{root}` or `{root.field.field}` is replaced, on each
//! call, by that argument's `Display` output; `{{` and `}}` stand for literal
//! braces. Parsing here only checks the shape; which roots exist is checked
//! against the function's arguments when the attribute is validated.

/// One piece of a parsed template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Piece {
    /// Literal text, braces already unescaped.
    Text(String),
    /// `{root.field...}`: an argument (or `self`) and a path of fields into it.
    Field { root: String, fields: Vec<String> },
}

/// Parses a template into pieces, or says what is wrong with it and how to fix it.
pub(crate) fn parse(text: &str) -> Result<Vec<Piece>, String> {
    let mut pieces = Vec::new();
    let mut literal = String::new();
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        match c {
            '{' if chars.peek().is_some_and(|&(_, next)| next == '{') => {
                chars.next();
                literal.push('{');
            }
            '}' if chars.peek().is_some_and(|&(_, next)| next == '}') => {
                chars.next();
                literal.push('}');
            }
            '}' => {
                return Err(format!(
                    "unmatched `}}` at byte {at} of the lock name: write `}}}}` for a literal brace"
                ));
            }
            '{' => {
                let start = at + 1;
                let Some(end) = text[start..].find(['}', '{']).map(|len| start + len) else {
                    return Err(format!(
                        "unclosed `{{` at byte {at} of the lock name: close the placeholder with `}}`, or write `{{{{` for a literal brace"
                    ));
                };
                if text[end..].starts_with('{') {
                    return Err(format!(
                        "unclosed `{{` at byte {at} of the lock name: close the placeholder with `}}` before opening another, or write `{{{{` for a literal brace"
                    ));
                }
                let inner = &text[start..end];
                pieces.extend(take_text(&mut literal));
                pieces.push(placeholder(inner)?);
                while chars.peek().is_some_and(|&(index, _)| index <= end) {
                    chars.next();
                }
            }
            c => literal.push(c),
        }
    }
    pieces.extend(take_text(&mut literal));
    Ok(pieces)
}

/// The exact lock name of a template without placeholders.
pub(crate) fn literal(pieces: &[Piece]) -> Option<String> {
    let mut name = String::new();
    for piece in pieces {
        match piece {
            Piece::Text(text) => name.push_str(text),
            Piece::Field { .. } => return None,
        }
    }
    Some(name)
}

fn take_text(literal: &mut String) -> Option<Piece> {
    (!literal.is_empty()).then(|| Piece::Text(std::mem::take(literal)))
}

fn placeholder(inner: &str) -> Result<Piece, String> {
    let trimmed = inner.trim();
    if trimmed.is_empty() {
        return Err(
            "empty placeholder `{}` in the lock name: name an argument, like `{tenant}`".to_owned(),
        );
    }
    let mut parts = trimmed.split('.');
    let root = parts.next().unwrap_or_default();
    let fields: Vec<&str> = parts.collect();
    let root_ok = is_identifier(root);
    let fields_ok = fields
        .iter()
        .all(|field| is_identifier(field) || is_tuple_index(field));
    if !root_ok || !fields_ok {
        return Err(format!(
            "`{{{inner}}}` is not a placeholder: write an argument name, optionally followed by fields, like `{{tenant}}` or `{{job.id}}` (formatting options are not supported)"
        ));
    }
    Ok(Piece::Field {
        root: root.to_owned(),
        fields: fields.into_iter().map(str::to_owned).collect(),
    })
}

fn is_identifier(text: &str) -> bool {
    let mut chars = text.chars();
    chars
        .next()
        .is_some_and(|first| first == '_' || first.is_alphabetic())
        && chars.all(|c| c == '_' || c.is_alphanumeric())
        && text != "_"
}

fn is_tuple_index(text: &str) -> bool {
    !text.is_empty()
        && text.chars().all(|c| c.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(text: &str) -> Piece {
        Piece::Text(text.to_owned())
    }

    fn field(root: &str, fields: &[&str]) -> Piece {
        Piece::Field {
            root: root.to_owned(),
            fields: fields.iter().map(|f| (*f).to_owned()).collect(),
        }
    }

    fn ok(template: &str) -> Vec<Piece> {
        match parse(template) {
            Ok(pieces) => pieces,
            Err(message) => panic!("{template:?} should parse, got: {message}"),
        }
    }

    fn err(template: &str) -> String {
        match parse(template) {
            Ok(pieces) => panic!("{template:?} should be refused, got {pieces:?}"),
            Err(message) => message,
        }
    }

    // These shapes are the documented template language; each must map to
    // the pieces the expansion formats.
    #[test]
    fn placeholders_fields_and_escapes_become_the_right_pieces() {
        assert_eq!(
            ok("reports:{tenant}"),
            vec![text("reports:"), field("tenant", &[])],
            "argument"
        );
        assert_eq!(
            ok("job:{job.id}:{self.shard}"),
            vec![
                text("job:"),
                field("job", &["id"]),
                text(":"),
                field("self", &["shard"])
            ],
            "fields and self"
        );
        assert_eq!(ok("{pair.0}"), vec![field("pair", &["0"])], "tuple index");
        assert_eq!(
            ok("{{literal}}:{id}"),
            vec![text("{literal}:"), field("id", &[])],
            "escaped braces are text"
        );
        assert_eq!(ok("plain"), vec![text("plain")], "no placeholder");
        assert_eq!(
            ok(""),
            Vec::<Piece>::new(),
            "empty parses; validation refuses it"
        );
        assert_eq!(
            ok("{ id }"),
            vec![field("id", &[])],
            "inner spaces are trimmed"
        );
    }

    // A literal name is what declared-lock checks compare across functions.
    #[test]
    fn only_a_template_without_placeholders_has_a_literal_name() {
        assert_eq!(
            literal(&ok("a{{b}}")).as_deref(),
            Some("a{b}"),
            "escapes unescaped"
        );
        assert_eq!(literal(&ok("a:{b}")), None, "placeholder means no literal");
    }

    // Every malformed template must be refused with the way to fix it.
    #[test]
    fn a_malformed_template_is_refused_with_the_fix() {
        assert!(err("a}b").contains("unmatched `}`"), "stray close");
        assert!(err("a{b").contains("unclosed `{`"), "missing close");
        assert!(err("a{b{c}}").contains("unclosed `{`"), "nested open");
        assert!(err("{}").contains("empty placeholder"), "empty");
        assert!(
            err("{a b}").contains("is not a placeholder"),
            "space inside"
        );
        assert!(err("{1}").contains("is not a placeholder"), "positional");
        assert!(err("{id:?}").contains("formatting options"), "format spec");
        assert!(
            err("{a..b}").contains("is not a placeholder"),
            "empty field"
        );
        assert!(err("{_}").contains("is not a placeholder"), "underscore");
    }
}
