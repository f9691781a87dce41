//! Taking libpq's TLS words out of a connection string, whichever of its
//! two forms: a `postgres://` (or `postgresql://`) URL, whose query holds
//! them, or a `key=value` string, read with libpq's own rules (blanks
//! around `=`, values in single quotes with `\` escapes) so that a word is
//! never missed and the rest is handed on byte for byte.

use crate::store::kit::take_words;

/// `conninfo` without the settings named in `words`, and those settings'
/// values (decoded), in the order given.
pub(super) fn take(conninfo: &str, words: &[&str]) -> Result<(String, Vec<(String, String)>), String> {
    if conninfo.starts_with("postgres://") || conninfo.starts_with("postgresql://") {
        return take_words(conninfo, words);
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

/// One `key = value` of a connection string: where it is, and what it says.
struct Setting {
    start: usize,
    end: usize,
    key: String,
    value: String,
}

/// Every setting of a `key=value` connection string.
fn settings(conninfo: &str) -> Result<Vec<Setting>, String> {
    let bytes = conninfo.as_bytes();
    let blank = |at: usize| bytes.get(at).is_some_and(u8::is_ascii_whitespace);
    let mut found = Vec::new();
    let mut at = 0;
    loop {
        while blank(at) {
            at += 1;
        }
        if at >= bytes.len() {
            return Ok(found);
        }
        let start = at;
        while at < bytes.len() && bytes[at] != b'=' && !blank(at) {
            at += 1;
        }
        let key = conninfo[start..at].to_owned();
        while blank(at) {
            at += 1;
        }
        if bytes.get(at) != Some(&b'=') {
            return Err(format!(
                "the connection string has `{key}` without `=`; write key=value settings, or a postgres:// URL"
            ));
        }
        at += 1;
        while blank(at) {
            at += 1;
        }
        let mut value = Vec::new();
        if bytes.get(at) == Some(&b'\'') {
            at += 1;
            loop {
                match bytes.get(at) {
                    None => {
                        return Err(format!(
                            "the value of `{key}` opens a quote it never closes"
                        ));
                    }
                    Some(b'\'') => {
                        at += 1;
                        break;
                    }
                    Some(b'\\') if at + 1 < bytes.len() => {
                        value.push(bytes[at + 1]);
                        at += 2;
                    }
                    Some(&byte) => {
                        value.push(byte);
                        at += 1;
                    }
                }
            }
        } else {
            while at < bytes.len() && !blank(at) {
                if bytes[at] == b'\\' && at + 1 < bytes.len() {
                    at += 1;
                }
                value.push(bytes[at]);
                at += 1;
            }
        }
        found.push(Setting {
            start,
            end: at,
            key,
            value: String::from_utf8_lossy(&value).into_owned(),
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
    }
}
