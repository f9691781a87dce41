//! The one table of the attribute's keys.
//!
//! [`KEYS`] lists every key the attribute takes, with its kind (free text, a
//! duration, a flag, one of a set of words, or a count), an example for
//! messages, and whether it is a field of `lock_core::LockOptions`.
//! [`args`](crate::args) parses against it, [`validate`](crate::validate)
//! checks values by their kind, and the expansion emits the options from it.
//!
//! Adding an option to the attribute is one row here (plus its field in
//! `lock_core::LockOptions`); only a check that involves other keys needs
//! code in `validate`.

/// What kind of value a key takes.
pub(crate) enum Kind {
    /// A string used as written (`name`, `manager`, `crate`).
    Text,
    /// A duration string; `zero` is the message refusing a zero value, or
    /// `None` when zero is allowed.
    Duration { zero: Option<&'static str> },
    /// A bare flag, on when written.
    Flag,
    /// One of a few words, each standing for a value in lock-core.
    Choice(&'static [Choice]),
    /// A positive integer literal (`permits = 4`).
    Count,
}

/// One word a [`Kind::Choice`] key accepts.
pub(crate) struct Choice {
    /// The word, as written in the attribute.
    pub(crate) word: &'static str,
    /// What it does, for the message listing the choices.
    pub(crate) means: &'static str,
    /// The lock-core path it stands for, below the crate root.
    pub(crate) path: &'static str,
}

/// One key of the attribute.
pub(crate) struct Key {
    pub(crate) name: &'static str,
    pub(crate) kind: Kind,
    /// A value to show in messages, as it would be written.
    pub(crate) example: &'static str,
    /// Whether the key is the `lock_core::LockOptions` field of the same
    /// name, emitted into the function's options constant.
    pub(crate) option: bool,
}

/// Every key the attribute takes, in the order the docs list them.
pub(crate) const KEYS: &[Key] = &[
    Key {
        name: "name",
        kind: Kind::Text,
        example: "\"reports:{tenant}\"",
        option: false,
    },
    Key {
        name: "ttl",
        kind: Kind::Duration {
            zero: Some(
                "a zero `ttl` expires at once: give the longest time the work may take, like \"30s\"",
            ),
        },
        example: "\"30s\"",
        option: false,
    },
    Key {
        name: "wait",
        kind: Kind::Duration { zero: None },
        example: "\"2s\"",
        option: false,
    },
    Key {
        name: "manager",
        kind: Kind::Text,
        example: "\"billing\"",
        option: false,
    },
    Key {
        name: "renew",
        kind: Kind::Flag,
        example: "",
        option: true,
    },
    Key {
        name: "max_hold",
        kind: Kind::Duration {
            zero: Some(
                "a zero `max_hold` stops renewal before it starts: give the longest the body may hold the lock, like \"1h\", or drop `renew` and `max_hold`",
            ),
        },
        example: "\"1h\"",
        option: true,
    },
    Key {
        name: "on_lost",
        kind: Kind::Choice(&[
            Choice {
                word: "cancel",
                means: "drop the body and return `Err(LeaseLost)` as soon as the lease is known lost",
                path: "OnLost::Cancel",
            },
            Choice {
                word: "continue",
                means: "log at ERROR and let the body finish; the default",
                path: "OnLost::Continue",
            },
        ]),
        example: "\"cancel\"",
        option: true,
    },
    Key {
        name: "at_least",
        kind: Kind::Duration {
            zero: Some(
                "a zero `at_least` keeps no claim after the body ends: drop it, or give how long the claim must stand, like \"1m\"",
            ),
        },
        example: "\"1m\"",
        option: true,
    },
    Key {
        name: "fenced",
        kind: Kind::Flag,
        example: "",
        option: true,
    },
    Key {
        name: "shared",
        kind: Kind::Flag,
        example: "",
        option: true,
    },
    Key {
        name: "contended",
        kind: Kind::Choice(&[
            Choice {
                word: "none",
                means: "a held lock makes the call return `Ok(None)`; the default",
                path: "OnContended::ReturnNone",
            },
            Choice {
                word: "error",
                means: "it returns `Err(Contended)` through the function's error type, and the return type is kept as declared",
                path: "OnContended::Error",
            },
        ]),
        example: "\"error\"",
        option: true,
    },
    Key {
        name: "permits",
        kind: Kind::Count,
        example: "4",
        option: true,
    },
    Key {
        name: "read",
        kind: Kind::Flag,
        example: "",
        option: true,
    },
    Key {
        name: "crate",
        kind: Kind::Text,
        example: "\"my_lock_core\"",
        option: false,
    },
];

/// The table row of `name`. Every name the crate asks for is in the table;
/// an unknown one is a bug here, caught by this crate's tests.
pub(crate) fn key(name: &str) -> &'static Key {
    KEYS.iter()
        .find(|key| key.name == name)
        .unwrap_or_else(|| unreachable!("`{name}` is not in the key table"))
}

#[cfg(test)]
mod tests {
    use super::*;

    // The table is the one list of keys: every key has a distinct name, every
    // value key an example for its messages, and every choice a lock-core
    // path, so a new row cannot leave a message or an expansion half done.
    #[test]
    fn every_row_of_the_key_table_is_complete() {
        for (index, row) in KEYS.iter().enumerate() {
            assert!(
                KEYS[..index].iter().all(|other| other.name != row.name),
                "`{}` is in the table twice",
                row.name
            );
            match &row.kind {
                Kind::Flag => assert!(row.example.is_empty(), "a flag has no value to show"),
                Kind::Choice(choices) => {
                    assert!(!choices.is_empty(), "`{}` offers no choice", row.name);
                    for choice in *choices {
                        assert!(
                            row.example.contains(choice.word) || choices.len() > 1,
                            "`{}`: example",
                            row.name
                        );
                        assert!(choice.path.contains("::"), "`{}`: path", choice.word);
                    }
                }
                Kind::Count => assert!(
                    row.example.parse::<u32>().is_ok_and(|n| n > 0),
                    "`{}` needs a positive number as its example",
                    row.name
                ),
                _ => assert!(
                    row.example.starts_with('"'),
                    "`{}` needs a quoted example",
                    row.name
                ),
            }
        }
    }
}
