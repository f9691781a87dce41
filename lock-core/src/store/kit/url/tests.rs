//! Tests of [`StoreUrl`]: the one reading of a store URL.

use super::*;

fn read(text: &str) -> StoreUrl {
    StoreUrl::parse(text).unwrap_or_else(|why| panic!("{text}: {why}"))
}

// The user info runs to the last `@` before the first `/`: a password
// written without escapes is still read whole, whatever it holds but a
// `/`, and a client library is handed it escaped.
#[test]
fn the_user_info_takes_every_character_but_a_slash() {
    for password in [
        "pa?ss",
        "pa,ss",
        "p@ss:w@rd",
        "a#b",
        "it's a 'b'",
        "x=y&z",
        "50%off",
        "é☃",
    ] {
        let url = read(&format!("redis://user:{password}@cache:6379/2"));
        assert_eq!(url.password(), Some(password), "{password}");
        assert_eq!(url.user(), Some("user"));
        assert_eq!(url.hosts()[0].to_string(), "cache:6379", "{password}");
        assert_eq!(url.path(), Some("2"));
        assert_eq!(
            read(&url.to_client_url()),
            url,
            "{password}: the client URL reads back the same"
        );
        assert_eq!(url.to_string(), "redis://user:***@cache:6379/2");
    }
    let escaped = read("postgres://app:p%40ss%2Fw%3Ford@db/app");
    assert_eq!(escaped.password(), Some("p@ss/w?ord"), "escapes decoded");
}

#[test]
fn hosts_ports_paths_queries_and_fragments_are_read_apart() {
    let url =
        read("Redis+Sentinel://:pw@s1:26379,[::1]:26380,s3/main?db=2&sentinel_password=w%26t#x");
    assert_eq!(url.scheme(), "redis+sentinel");
    assert_eq!(url.user(), None, "a password alone");
    let hosts: Vec<String> = url.hosts().iter().map(Host::to_string).collect();
    assert_eq!(hosts, ["s1:26379", "[::1]:26380", "s3"]);
    assert_eq!(url.hosts()[1].bare(), "::1");
    assert_eq!(url.path(), Some("main"));
    assert_eq!(url.setting("db"), Some("2"));
    assert_eq!(url.setting("sentinel_password"), Some("w&t"));
    assert_eq!(url.fragment(), Some("x"));
    assert_eq!(
        url.to_string(),
        "redis+sentinel://:***@s1:26379,[::1]:26380,s3/main?db=2&sentinel_password=***#***",
        "every secret hidden, and the fragment, which may be a password's tail"
    );
    let socket = read("redis+unix:///run/redis.sock?db=1&pass=pw");
    assert!(socket.hosts().is_empty(), "a socket URL has no host");
    assert_eq!(socket.path(), Some("run/redis.sock"));
    assert_eq!(
        socket.to_client_url(),
        "redis+unix:///run/redis.sock?db=1&pass=pw"
    );
    assert_eq!(
        socket.to_string(),
        "redis+unix:///run/redis.sock?db=1&pass=***"
    );
}

#[test]
fn a_list_of_urls_splits_where_a_scheme_follows_a_comma() {
    let urls = StoreUrl::parse_list("redis://u:a,b@h1:1, redis://h2:2,h3:3").expect("a list");
    assert_eq!(urls.len(), 2, "{urls:?}");
    assert_eq!(
        urls[0].password(),
        Some("a,b"),
        "a comma in a password stays"
    );
    assert_eq!(
        urls[1].hosts().len(),
        2,
        "commas between hosts stay in their URL"
    );
}

// What no store could read is refused, and the refusal quotes none of
// the text, which may hold a password anywhere.
#[test]
fn a_url_that_cannot_be_read_is_refused_without_quoting_it() {
    for bad in [
        "no scheme zorro1",
        "redis://u:zorro1@h:port",
        "redis://u:zorro1@h:99999",
        "redis://u:zorro1@h,,i",
        "redis://u:12/zorro1@h",
        "redis://u:zorro1@[::1",
        "redis://u:zorro1@h st",
    ] {
        let why = StoreUrl::parse(bad).expect_err(bad);
        assert!(!why.contains("zorro1"), "{bad}: {why}");
    }
}

#[test]
fn a_scheme_is_read_case_blind_and_only_when_it_is_one() {
    let (lowered, rest) = scheme("REDIS://host:6379").expect("a scheme");
    assert_eq!((&*lowered, rest), ("redis", "host:6379"));
    assert_eq!(
        scheme("redis+cluster://a,b").map(|(s, _)| s.into_owned()),
        Some("redis+cluster".to_owned())
    );
    assert!(scheme("127.0.0.1:6379").is_none(), "no `://`");
    assert!(
        scheme("host=db password=a://b").is_none(),
        "spaces are no part of a scheme"
    );
}

// A `%` that starts no escape is kept, as libpq and URL parsers keep it:
// `50%off` is a password a server may have been given.
#[test]
fn percent_escapes_decode_and_a_lone_percent_is_kept() {
    assert_eq!(percent_decode("s%40cret").as_deref(), Ok("s@cret"));
    assert_eq!(percent_decode("plain").as_deref(), Ok("plain"));
    assert_eq!(percent_decode("50%").as_deref(), Ok("50%"));
    assert_eq!(percent_decode("50%off").as_deref(), Ok("50%off"));
    assert!(percent_decode("%ff").is_err(), "escapes that are not UTF-8");
}
