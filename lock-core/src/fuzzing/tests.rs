//! The fuzz targets' properties, checked on every test run for a bounded
//! time: over the seed inputs in the repository's `fuzz/seeds/`, and over
//! inputs generated from a fixed seed, so that a failure here is replayed
//! by running the test again.

use std::path::Path;

/// SplitMix64: a small seeded generator, the same inputs every run.
struct Generated(u64);

impl Generated {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// An input of up to 200 bytes: random bytes, or (half the time)
    /// bytes of `alphabet`, the characters the parser treats specially,
    /// which random bytes seldom hit.
    fn input(&mut self, alphabet: &[u8]) -> Vec<u8> {
        let len = (self.next() % 200) as usize;
        let from_alphabet = self.next() % 2 == 0;
        (0..len)
            .map(|_| {
                let pick = self.next();
                if from_alphabet {
                    alphabet[(pick % alphabet.len() as u64) as usize]
                } else {
                    pick as u8
                }
            })
            .collect()
    }
}

/// How many generated inputs each target's check gets.
const GENERATED: usize = 3000;

/// Runs `check` over the seeds of `target` (there must be some) and over
/// generated inputs; returns how many seeds there were.
fn exercise(target: &str, alphabet: &[u8], check: impl Fn(&[u8])) -> usize {
    let folder = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/seeds")
        .join(target);
    let mut seeds = 0;
    for entry in std::fs::read_dir(&folder)
        .unwrap_or_else(|e| panic!("the seeds of {target}, in {}: {e}", folder.display()))
    {
        let path = entry.expect("a seed").path();
        let seed = std::fs::read(&path).expect("a seed file");
        check(&seed);
        seeds += 1;
    }
    assert!(seeds > 0, "{target} has no seeds in {}", folder.display());
    let mut generated = Generated(target.len() as u64);
    for _ in 0..GENERATED {
        check(&generated.input(alphabet));
    }
    seeds
}

/// What store URLs and `key=value` strings are made of.
const URL_TEXT: &[u8] = b"redis://postgres:@/?#&=,%2F40:[]1 \t'\\\"ab.-_~+ \xc3\xa9";

// The properties of the `store_url` target: store URLs read and written
// back, and no password in what is shown of one.
#[test]
fn store_urls_read_back_and_what_is_shown_of_them_holds_no_password() {
    exercise("store_url", URL_TEXT, |data| {
        super::check_store_url(data);
        super::check_redaction(data);
    });
}

// The properties of the `conninfo` target.
#[test]
fn libpq_strings_read_back_and_their_errors_quote_none_of_them() {
    exercise(
        "conninfo",
        b"host=password'\\ \t=dbname\xc2\xa0ab",
        super::check_conninfo,
    );
}

// The properties of the `attribute_text` target.
#[test]
fn durations_add_up_and_templates_read_back() {
    exercise(
        "attribute_text",
        b"0123456789 nsumhd{}._abc\xc2\xb5",
        |data| {
            super::check_duration(data);
            super::check_template(data);
        },
    );
}

// The properties of the `stored_keys` target.
#[test]
fn owner_tokens_and_stored_keys_read_back_as_what_was_written() {
    exercise(
        "stored_keys",
        b"\0reader\0writer-wait\x01@:ab",
        super::check_stored_keys,
    );
}

// The properties of the `memcached_replies` target: a reply is only ever
// handed to the request whose opaque it carries.
#[cfg(feature = "memcached")]
#[test]
fn memcached_replies_go_only_to_the_request_whose_opaque_they_carry() {
    exercise(
        "memcached_replies",
        b"HD VA EN O1234567 t\r\n",
        super::check_memcached_replies,
    );
}

// The properties of the `redis_replies` target.
#[cfg(feature = "redis")]
#[test]
fn redis_holder_replies_decode_to_their_holders_and_lease_keys_read_back() {
    exercise(
        "redis_replies",
        b"{}%7D%25ab\x00\x01\x02",
        super::check_redis_replies,
    );
}
