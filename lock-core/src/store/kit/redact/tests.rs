//! Tests of [`redacted`](super::redacted) and [`scrub`](super::scrub):
//! every form the stores' readers accept hides its password whole.

use super::*;

// Whatever shows a URL (an error, `Debug`, the `locks` tool) shows it
// through these: a password that slips past them ends up in logs.
#[test]
fn passwords_are_found_in_every_url_of_a_list_and_scrubbed() {
    let url = "redis+cluster://admin:hunter2@10.0.0.1:6379,10.0.0.2:6379";
    assert_eq!(
        secrets(url),
        ["hunter2"],
        "the one password of a cluster URL"
    );
    let list = "redis://:s3cret@a:1,redis://u:other@b:2,redis://c:3";
    let found = secrets(list);
    assert!(
        found.contains(&"s3cret".to_owned()) && found.contains(&"other".to_owned()),
        "each URL's password: {found:?}"
    );
    let message = "could not reach redis://u:other@b:2 (auth other failed)";
    let scrubbed = scrub(message, list);
    assert!(!scrubbed.contains("other"), "scrubbed: {scrubbed}");
    assert_eq!(
        redacted("postgres://app:pw@db/test"),
        "postgres://app:***@db/test",
        "the user stays, the password goes"
    );
    assert_eq!(
        redacted("redis://127.0.0.1:6379"),
        "redis://127.0.0.1:6379",
        "a URL without secrets is shown as given"
    );
    let sentinel = "redis+sentinel://:data@s1:26379,s2:26379/mymaster?sentinel_password=watch";
    let found = secrets(sentinel);
    assert!(
        found.contains(&"data".to_owned()) && found.contains(&"watch".to_owned()),
        "the data nodes' and the sentinels' passwords: {found:?}"
    );
    assert_eq!(
        redacted(sentinel),
        "redis+sentinel://:***@s1:26379,s2:26379/mymaster?sentinel_password=***"
    );
    assert!(
        secrets("postgres://postgres@db/test").is_empty(),
        "a user name alone is no secret (scrubbing it would mangle every message)"
    );
}

// A client library may quote the password decoded, escaped as it was
// handed, or as the URL wrote it.
#[test]
fn escaped_passwords_and_key_value_settings_are_secrets_too() {
    let url = "redis://admin:p%40ss%3Aword@cache:6379";
    let shown = scrub("auth failed for p@ss:word (p%40ss%3Aword)", url);
    assert!(
        !shown.contains("p@ss:word") && !shown.contains("p%40ss"),
        "both forms hidden: {shown}"
    );
    let key_value = "host=db user=app password='hunter2' dbname=app";
    assert_eq!(
        redacted(key_value),
        "host=db user=app password=*** dbname=app"
    );
    let query = "postgres://app@db/app?sslmode=disable&password=hunter2";
    assert_eq!(
        redacted(query),
        "postgres://app@db/app?sslmode=disable&password=***"
    );
}

// A `/` in a password must be escaped: left raw, it ends the hosts, and
// the text no longer reads as a URL with that password. It is then
// refused, and shown no more than its scheme.
#[test]
fn a_password_with_a_raw_slash_is_refused_and_not_shown() {
    for url in [
        "redis://admin:zorro1/quill2@tiger3@cache:6379",
        "redis://admin:1234/quill2@cache:6379",
    ] {
        let shown = redacted(url);
        assert!(
            !shown.contains("zorro1") && !shown.contains("quill2") && !shown.contains("tiger3"),
            "{url}: {shown}"
        );
        assert!(
            shown.starts_with("redis://"),
            "{url}: the scheme is shown: {shown}"
        );
    }
}

// A `/` left raw in a password ends the hosts there; when a `?` follows
// it, the rest of the password and its `@` land in the query (or, before
// the `?`, in the path; or, after a `#`, in the fragment, with the query
// before it shown). Found by the redaction
// property of the `store_url` fuzz target: a raw `@` anywhere after the
// hosts is refused, as one in the path was, and the text is shown no
// more than its scheme.
#[test]
fn a_password_with_a_raw_slash_before_a_query_is_refused_and_not_shown() {
    for url in [
        "redis://admin:zorro1/?quill2@cache:6379",
        "redis://admin:1234/quill2?tiger3@cache:6379",
        "redis://admin:1234?/quill2@cache:6379",
        "redis://,redis://l:/?zorro1/quill2+@2@cache:37",
        "postgres://app:zorro1/?quill2@db/app",
        "etcds://,etcds://@r:/?zorro1#quill2\"@cache:6/",
    ] {
        let shown = redacted(url);
        assert_eq!(
            leaked(&shown, &["zorro1", "quill2", "tiger3"]),
            None,
            "{url:?} is shown as {shown:?}, with a piece of its password"
        );
        let scheme = url.split("://").next().unwrap_or_default();
        assert!(
            shown.starts_with(scheme),
            "{url}: the scheme is shown: {shown}"
        );
    }
}

/// Whether `shown` holds any of `words`: the pieces of a password a
/// leak would show, each distinctive enough not to occur by chance.
fn leaked<'a>(shown: &str, words: &[&'a str]) -> Option<&'a str> {
    words.iter().copied().find(|word| shown.contains(word))
}

// libpq's `key=value` form takes blanks around `=`, values in single
// quotes holding blanks, `\` escapes and any Unicode blank between
// settings: a password written any of these ways is read whole, so it
// must be hidden whole, or a log shows the part after the blank.
#[test]
fn every_way_libpq_writes_a_password_is_hidden_whole() {
    for (text, words) in [
        ("host=db password = zorro1 dbname=app", &["zorro1"][..]),
        (
            "host=db password='correct horse' dbname=app",
            &["correct", "horse"],
        ),
        ("host=db password = 'correct horse'", &["correct", "horse"]),
        (
            "host=db password='it\\'s zorro1 quill2'",
            &["zorro1", "quill2"],
        ),
        (
            "host=db password=zorro1\\ quill2 user=app",
            &["zorro1", "quill2"],
        ),
        ("password=zorro1\thost=db", &["zorro1"]),
        ("host=db\u{a0}password=zorro1", &["zorro1"]),
        ("host=db sslpassword=zorro1", &["zorro1"]),
    ] {
        let shown = redacted(text);
        assert_eq!(
            leaked(&shown, words),
            None,
            "{text:?} is shown as {shown:?}, with a piece of its password"
        );
        assert!(
            shown.contains("db") || shown.is_empty(),
            "{text:?}: the rest is still shown, or nothing: {shown:?}"
        );
    }
}

// A URL parser takes a `?`, `,`, `@` or `:` in the user info (the
// user info ends at the last `@` before the path), and percent-escapes
// anywhere in it; Redis over a socket takes its password as `?pass=`.
#[test]
fn every_character_a_url_takes_in_its_user_info_is_hidden_with_the_password() {
    for (url, words) in [
        ("redis://u:zorro1?quill2@h:6379", &["zorro1", "quill2"][..]),
        ("redis://u:zorro1,quill2@h:6379/0", &["zorro1", "quill2"]),
        (
            "postgres://app:zorro1?quill2,tiger3@db/app?sslmode=disable",
            &["zorro1", "quill2", "tiger3"],
        ),
        (
            "redis://u:zorro1@quill2:tiger3@h:1",
            &["zorro1", "quill2", "tiger3"],
        ),
        (
            "redis://u:zorro1%40quill2%3Atiger3@h",
            &["zorro1", "quill2", "tiger3"],
        ),
        (
            "redis+cluster://u:zorro1,quill2@a:1,b:2",
            &["zorro1", "quill2"],
        ),
        (
            "redis://u:zorro1,quill2@a:1,redis://b:2",
            &["zorro1", "quill2"],
        ),
        ("redis+unix:///run/redis.sock?pass=zorro1", &["zorro1"]),
        ("unix:///run/redis.sock?db=1&pass=zorro1", &["zorro1"]),
        (
            "redis+sentinel://:zorro1?quill2@s1,s2/main?sentinel_password=tiger3",
            &["zorro1", "quill2", "tiger3"],
        ),
        (
            "etcd://locks:zorro1,quill2@a:2379,b:2379",
            &["zorro1", "quill2"],
        ),
        (
            "memcaches://u:zorro1?quill2@cache:11211",
            &["zorro1", "quill2"],
        ),
    ] {
        let shown = redacted(url);
        assert_eq!(
            leaked(&shown, words),
            None,
            "{url:?} is shown as {shown:?}, with a piece of its password"
        );
    }
}

// A text no reader reads (a quote never closed, a blank in an unquoted
// value, a port that is no number, no scheme and no `=`) says nothing of
// where its password is: none of it is shown.
#[test]
fn a_text_that_cannot_be_read_is_not_shown() {
    for (text, words) in [
        ("host=db password=correct horse", &["correct", "horse"][..]),
        ("host=db password='zorro1 quill2", &["zorro1", "quill2"]),
        ("redis://u:zorro1@h:port", &["zorro1"]),
        ("zorro1 quill2", &["zorro1", "quill2"]),
    ] {
        let shown = redacted(text);
        assert_eq!(
            leaked(&shown, words),
            None,
            "{text:?} is shown as {shown:?}"
        );
    }
}
