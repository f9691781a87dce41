//! Taking libpq's TLS words out of a connection string, whichever of its
//! two forms: a `postgres://` (or `postgresql://`) URL, whose query holds
//! them, or a `key=value` string, read with libpq's own rules (blanks
//! around `=`, values in single quotes with `\` escapes) so that a word is
//! never missed and the rest is handed on byte for byte.

use crate::store::kit::percent_decode;

/// `conninfo` without the settings named in `words`, and those settings'
/// values (decoded), in the order given.
pub(super) fn take(
    conninfo: &str,
    words: &[&str],
) -> Result<(String, Vec<(String, String)>), String> {
    for scheme in ["postgres://", "postgresql://"] {
        if let Some(rest) = conninfo.strip_prefix(scheme) {
            return take_from_url(conninfo, conninfo.len() - rest.len(), words);
        }
    }
    let mut rest = String::with_capacity(conninfo.len());
    let mut taken = Vec::new();
    let mut kept_up_to = 0;
    for setting in settings(conninfo)? {
        if words.contains(&setting.key.as_str()) {
            rest.push_str(&conninfo[kept_up_to..setting.start]);
            kept_up_to = setting.end;
            taken.push((setting.key, setting.value));
        }
    }
    rest.push_str(&conninfo[kept_up_to..]);
    Ok((rest, taken))
}

/// The URL form: its query starts at the first `?` after the credentials,
/// which end at the first `@` (as tokio-postgres reads them: a password
/// may hold a `?`).
fn take_from_url(
    url: &str,
    after_scheme: usize,
    words: &[&str],
) -> Result<(String, Vec<(String, String)>), String> {
    let credentials = url[after_scheme..]
        .find('@')
        .map_or(after_scheme, |at| after_scheme + at + 1);
    let Some(mark) = url[credentials..].find('?').map(|at| credentials + at) else {
        return Ok((url.to_owned(), Vec::new()));
    };
    let (base, query) = (&url[..mark], &url[mark + 1..]);
    let mut kept = Vec::new();
    let mut taken = Vec::new();
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let key = percent_decode(key)?;
        if words.contains(&key.as_str()) {
            taken.push((key, percent_decode(value)?));
        } else {
            kept.push(pair);
        }
    }
    let rest = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((rest, taken))
}

/// One `key = value` of a connection string: where it is, and what it says.
struct Setting {
    start: usize,
    end: usize,
    key: String,
    value: String,
}

/// Every setting of a `key=value` connection string, read as
/// tokio-postgres reads it: any Unicode blank separates (a pasted
/// non-breaking space included), an empty key is an error.
fn settings(conninfo: &str) -> Result<Vec<Setting>, String> {
    let mut chars = conninfo.char_indices().peekable();
    let at = |chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>| {
        chars.peek().map_or(conninfo.len(), |(at, _)| *at)
    };
    let skip_blanks = |chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>| {
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
    };
    let mut found = Vec::new();
    loop {
        skip_blanks(&mut chars);
        if chars.peek().is_none() {
            return Ok(found);
        }
        let start = at(&mut chars);
        while chars
            .next_if(|(_, c)| *c != '=' && !c.is_whitespace())
            .is_some()
        {}
        let key = conninfo[start..at(&mut chars)].to_owned();
        skip_blanks(&mut chars);
        if chars.next_if(|(_, c)| *c == '=').is_none() {
            return Err(format!(
                "the connection string has `{key}` without `=`; write key=value settings, or a postgres:// URL"
            ));
        }
        if key.is_empty() {
            return Err(
                "the connection string has an `=` with no key before it; write key=value settings"
                    .to_owned(),
            );
        }
        skip_blanks(&mut chars);
        let mut value = String::new();
        if chars.next_if(|(_, c)| *c == '\'').is_some() {
            loop {
                match chars.next() {
                    None => {
                        return Err(format!(
                            "the value of `{key}` opens a quote it never closes"
                        ));
                    }
                    Some((_, '\'')) => break,
                    Some((_, '\\')) => match chars.next() {
                        Some((_, escaped)) => value.push(escaped),
                        None => {
                            return Err(format!(
                                "the value of `{key}` opens a quote it never closes"
                            ));
                        }
                    },
                    Some((_, c)) => value.push(c),
                }
            }
        } else {
            while let Some((_, c)) = chars.next_if(|(_, c)| !c.is_whitespace()) {
                if c == '\\' {
                    if let Some((_, escaped)) = chars.next() {
                        value.push(escaped);
                    }
                } else {
                    value.push(c);
                }
            }
        }
        found.push(Setting {
            start,
            end: at(&mut chars),
            key,
            value,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::take;

    const WORDS: [&str; 2] = ["sslmode", "sslrootcert"];

    #[test]
    fn blanks_around_the_equals_sign_and_quotes_hide_no_word() {
        let (rest, taken) = take(
            "host=h user=u sslmode = require sslrootcert='/etc/my ca.pem'",
            &WORDS,
        )
        .expect("parse");
        assert_eq!(rest.trim(), "host=h user=u");
        assert_eq!(
            taken,
            [
                ("sslmode".to_owned(), "require".to_owned()),
                ("sslrootcert".to_owned(), "/etc/my ca.pem".to_owned())
            ]
        );
    }

    #[test]
    fn a_value_holding_a_url_is_still_a_key_value_string() {
        let (rest, taken) =
            take("host=h application_name=svc://x sslmode=require", &WORDS).expect("parse");
        assert_eq!(rest, "host=h application_name=svc://x ");
        assert_eq!(taken, [("sslmode".to_owned(), "require".to_owned())]);
    }

    #[test]
    fn the_rest_is_handed_on_byte_for_byte() {
        let given = "host=h password='a  b\\' c' user=u";
        let (rest, taken) = take(given, &WORDS).expect("parse");
        assert_eq!(rest, given);
        assert!(taken.is_empty());
        // A quoted value that reads like a word is a value, not a word.
        let (rest, taken) = take("host=h password='x sslmode=disable'", &WORDS).expect("parse");
        assert_eq!(rest, "host=h password='x sslmode=disable'");
        assert!(taken.is_empty());
    }

    #[test]
    fn a_broken_string_is_an_error_not_a_guess() {
        assert!(take("host=h password='open", &WORDS).is_err());
        assert!(take("host=h lonely", &WORDS).is_err());
        // tokio-postgres stops reading at an empty key: the settings after
        // it (a mode among them) would be lost.
        assert!(take("host=h = sslmode=require", &WORDS).is_err());
    }

    // Any blank tokio-postgres splits on splits here too: a non-breaking
    // space pasted from a page must not hide a mode inside a value.
    #[test]
    fn unicode_blanks_separate_settings() {
        for given in [
            "host=h user=u\u{a0}sslmode=require",
            "host=h user=u\u{0b}sslmode=require",
            "host=h\u{3000}sslmode=require",
        ] {
            let (_, taken) = take(given, &WORDS).expect(given);
            assert_eq!(
                taken,
                [("sslmode".to_owned(), "require".to_owned())],
                "{given:?}"
            );
        }
    }

    // The credentials end at the first `@`, as tokio-postgres reads them:
    // a `?` in a password does not start the query.
    #[test]
    fn a_question_mark_in_the_password_does_not_start_the_query() {
        let (rest, taken) = take("postgres://u:pa?ss@h/db?sslmode=require", &WORDS).expect("parse");
        assert_eq!(rest, "postgres://u:pa?ss@h/db");
        assert_eq!(taken, [("sslmode".to_owned(), "require".to_owned())]);
    }
}
