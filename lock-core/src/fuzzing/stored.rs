//! What the stores keep and read back: owner tokens, and the etcd store's
//! keys (a name's writer, readers and waiting writers' claims).

use super::Input;
use crate::token::{
    description_of_this_process, new_token_described, own_random_part, own_token, owner_of,
};

/// Owner tokens and stored keys from any bytes: no panic; a token this
/// crate makes says its holder's description; a token is taken for this
/// process's own only when it is exactly one this process would write.
/// With the `etcd` feature, the etcd store's keys: each key of a name
/// reads back as that name and kind, lies in the name's range and only
/// there, and any stored key read names a prefix of it.
pub fn check_stored_keys(data: &[u8]) {
    let mut input = Input::new(data);
    let description = input.text(40);
    let token = new_token_described(&description);
    assert_eq!(owner_of(&token), description, "the owner of {token:?}");
    let random = input.text(40);
    let text = match input.below(3) {
        0 => format!("{random}@{}", description_of_this_process()),
        1 => format!("{random}@{description}"),
        _ => random.clone(),
    };
    assert!(
        text.ends_with(owner_of(&text)),
        "the owner of {text:?} is the end of it"
    );
    if let Some(random) = own_random_part(&text) {
        assert_eq!(own_token(&random), text, "{text:?} is this process's own");
    }
    #[cfg(feature = "etcd")]
    etcd_keys(&mut input);
}

#[cfg(feature = "etcd")]
fn etcd_keys(input: &mut Input<'_>) {
    use crate::store::etcd::keys::{
        Stored, check_name, claim, claims, companions_end, parse, reader, readers, readers_end,
    };

    let name = input.text(24);
    let token = input.text(24);
    let other = input.text(24);
    let stored = String::from_utf8_lossy(input.rest()).into_owned();
    let kind = parse(&stored);
    assert!(
        stored.starts_with(kind.name()),
        "{stored:?} is read as {kind:?}, a name that does not start it"
    );
    if matches!(kind, Stored::Reader(_) | Stored::Claim(_)) {
        assert!(
            !kind.name().contains('\0'),
            "{stored:?}: a companion's name holds no NUL"
        );
    }
    if check_name(&name).is_err() {
        assert!(name.contains('\0'), "{name:?} is refused only for a NUL");
        return;
    }
    let in_range = |key: &str, (start, end): (&str, &str)| key >= start && key < end;
    let end = companions_end(&name);
    let reader_key = reader(&name, &token);
    let claim_key = claim(&name, &token);
    assert_eq!(parse(&name), Stored::Writer(name.as_str()), "{name:?}");
    assert_eq!(
        parse(&reader_key),
        Stored::Reader(name.as_str()),
        "{reader_key:?}"
    );
    assert_eq!(
        parse(&claim_key),
        Stored::Claim(name.as_str()),
        "{claim_key:?}"
    );
    for key in [&name, &reader_key, &claim_key] {
        assert!(
            in_range(key, (&name, &end)),
            "{key:?} is in the range of {name:?}"
        );
    }
    let (start, stop) = readers(&name);
    assert!(
        in_range(&reader_key, (&start, &stop)),
        "{reader_key:?} among the readers"
    );
    assert!(
        !in_range(&claim_key, (&start, &stop)),
        "{claim_key:?} not a reader"
    );
    assert_eq!(readers_end(&name), stop, "the readers' end");
    let (start, stop) = claims(&name);
    assert!(
        in_range(&claim_key, (&start, &stop)),
        "{claim_key:?} among the claims"
    );
    assert!(
        !in_range(&reader_key, (&start, &stop)),
        "{reader_key:?} not a claim"
    );
    if other != name && check_name(&other).is_ok() {
        for key in [other.clone(), reader(&other, &token), claim(&other, &token)] {
            assert!(
                !in_range(&key, (&name, &end)),
                "{key:?}, a key of {other:?}, is in the range of {name:?}"
            );
        }
    }
}
