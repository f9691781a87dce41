//! The Lua scripts behind every operation, and how they are sent.
//!
//! Each script lives in `lua/` next to this file, with its KEYS, ARGV and
//! reply described at its top. They are sent by SHA1 (`EVALSHA`), loaded
//! when the store connects, and reloaded once, within the call's deadline,
//! when a server that restarted or flushed its cache answers `NOSCRIPT`.
//!
//! The scripts that announce a release (or a fenced name's new holder)
//! start with a prologue of the store's own, setting `PUBLISH` (the
//! command) and `CHANNEL` (`:` and the channel suffix): both are fixed for
//! the store's life, and as arguments they would cost the server on every
//! release (each argument about as much as a short command). Stores with
//! different settings load different scripts.

use ::redis::{Cmd, Script};

use super::keys::KeyArg;

/// The scripts, compiled (hashed) once per store.
pub(super) struct Scripts {
    pub(super) acquire: Script,
    pub(super) read_acquire: Script,
    pub(super) release: Script,
    pub(super) extend: Script,
    pub(super) force_release: Script,
    pub(super) holder: Script,
    pub(super) withdraw: Script,
}

impl Scripts {
    /// The scripts of a store that announces releases with `publish`
    /// (`PUBLISH` or `SPUBLISH`) on each lease's channel ending in
    /// `channel` (the [`RedisConfig::channel`](super::RedisConfig::channel)
    /// suffix).
    pub(super) fn new(publish: &str, channel: &str) -> Self {
        let announcing = |body: &str| {
            let mut text = format!(
                "local PUBLISH, CHANNEL = {}, {}\n",
                lua_string(publish),
                lua_string(&format!(":{channel}"))
            );
            text.push_str(body);
            Script::new(&text)
        };
        Scripts {
            acquire: announcing(include_str!("lua/acquire.lua")),
            read_acquire: Script::new(include_str!("lua/read_acquire.lua")),
            release: announcing(include_str!("lua/release.lua")),
            extend: Script::new(include_str!("lua/extend.lua")),
            force_release: announcing(include_str!("lua/force_release.lua")),
            holder: Script::new(include_str!("lua/holder.lua")),
            withdraw: announcing(include_str!("lua/withdraw.lua")),
        }
    }

    /// Every script, to load them all when the store connects.
    pub(super) fn all(&self) -> [&Script; 7] {
        [
            &self.acquire,
            &self.read_acquire,
            &self.release,
            &self.extend,
            &self.force_release,
            &self.holder,
            &self.withdraw,
        ]
    }
}

/// The keys each script is sent, in the order of the `KEYS` its header
/// lists: every key it touches (a cluster checks only these while a slot
/// migrates, and a server that enforces declared keys refuses any other).
pub(super) mod sent {
    use super::KeyArg;

    /// acquire.lua: lease, waiters marker, fencing counter, writers'
    /// claims, elected, fenced.
    pub(crate) fn acquire(key: &str) -> [KeyArg<'_>; 6] {
        [
            KeyArg::lease(key),
            KeyArg::waiters(key),
            KeyArg::fence(key),
            KeyArg::writer_waits(key),
            KeyArg::elected(key),
            KeyArg::fenced(key),
        ]
    }

    /// read_acquire.lua: lease, waiters marker, readers, writers' claims.
    pub(crate) fn read_acquire(key: &str) -> [KeyArg<'_>; 4] {
        [
            KeyArg::lease(key),
            KeyArg::waiters(key),
            KeyArg::readers(key),
            KeyArg::writer_waits(key),
        ]
    }

    /// release.lua: lease, waiters marker, writers' claims, elected,
    /// readers.
    pub(crate) fn release(key: &str) -> [KeyArg<'_>; 5] {
        [
            KeyArg::lease(key),
            KeyArg::waiters(key),
            KeyArg::writer_waits(key),
            KeyArg::elected(key),
            KeyArg::readers(key),
        ]
    }

    /// extend.lua: lease, readers.
    pub(crate) fn extend(key: &str) -> [KeyArg<'_>; 2] {
        [KeyArg::lease(key), KeyArg::readers(key)]
    }

    /// force_release.lua: lease, waiters marker, readers, writers' claims,
    /// elected.
    pub(crate) fn force_release(key: &str) -> [KeyArg<'_>; 5] {
        [
            KeyArg::lease(key),
            KeyArg::waiters(key),
            KeyArg::readers(key),
            KeyArg::writer_waits(key),
            KeyArg::elected(key),
        ]
    }

    /// holder.lua: lease, readers, elected, fencing counter, fenced.
    pub(crate) fn holder(key: &str) -> [KeyArg<'_>; 5] {
        [
            KeyArg::lease(key),
            KeyArg::readers(key),
            KeyArg::elected(key),
            KeyArg::fence(key),
            KeyArg::fenced(key),
        ]
    }

    /// withdraw.lua: lease, waiters marker, writers' claims.
    pub(crate) fn withdraw(key: &str) -> [KeyArg<'_>; 3] {
        [
            KeyArg::lease(key),
            KeyArg::waiters(key),
            KeyArg::writer_waits(key),
        ]
    }
}

/// `EVALSHA <hash> <number of keys> <keys>...`, for the caller to append the
/// arguments to. Built as one command rather than through
/// `Script::prepare_invoke`, which copies every key and argument into
/// buffers of its own on each call.
pub(super) fn evalsha(script: &Script, keys: &[KeyArg<'_>]) -> Cmd {
    // Sized once: the hash, the key count, the keys, and room for the few
    // short arguments every script here takes, so the buffer never regrows.
    let key_bytes: usize = keys.iter().map(KeyArg::len_hint).sum();
    let mut call = Cmd::with_capacity(keys.len() + 8, 64 + key_bytes + 128);
    call.arg("EVALSHA").arg(script.get_hash()).arg(keys.len());
    for key in keys {
        call.arg(key);
    }
    call
}

/// `text` as a Lua string literal: every byte as a decimal escape, so no
/// quote, backslash, newline or other byte of a configured name can end the
/// literal early or change the script around it.
fn lua_string(text: &str) -> String {
    use std::fmt::Write;
    let mut literal = String::with_capacity(2 + 4 * text.len());
    literal.push('"');
    for byte in text.bytes() {
        // Three digits always: a digit after a shorter escape would be read
        // as part of it.
        let _ = write!(literal, "\\{byte:03}");
    }
    literal.push('"');
    literal
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Scripts {
        /// How many keys the script in `file` is sent.
        fn keys_of(&self, file: &str) -> usize {
            match file {
                "acquire.lua" => sent::acquire("k").len(),
                "read_acquire.lua" => sent::read_acquire("k").len(),
                "release.lua" => sent::release("k").len(),
                "extend.lua" => sent::extend("k").len(),
                "force_release.lua" => sent::force_release("k").len(),
                "holder.lua" => sent::holder("k").len(),
                "withdraw.lua" => sent::withdraw("k").len(),
                other => panic!("no script {other}"),
            }
        }
    }

    /// Every script, by file name, with its text.
    const SOURCES: [(&str, &str); 7] = [
        ("acquire.lua", include_str!("lua/acquire.lua")),
        ("read_acquire.lua", include_str!("lua/read_acquire.lua")),
        ("release.lua", include_str!("lua/release.lua")),
        ("extend.lua", include_str!("lua/extend.lua")),
        ("force_release.lua", include_str!("lua/force_release.lua")),
        ("holder.lua", include_str!("lua/holder.lua")),
        ("withdraw.lua", include_str!("lua/withdraw.lua")),
    ];

    /// The code of a script, its comments left out.
    fn code(script: &str) -> impl Iterator<Item = (usize, &str)> {
        script
            .lines()
            .enumerate()
            .map(|(at, line)| (at + 1, line.split("--").next().unwrap_or("")))
    }

    // A key a script names for itself, instead of being sent it, is one the
    // server does not know the script touches: a cluster checks only the
    // declared keys' slot while that slot migrates (the script then runs
    // half against keys already moved away), and servers that enforce
    // declared keys refuse the script. Every key is sent: the only names a
    // script builds are channels (`.. CHANNEL`).
    #[test]
    fn every_key_a_script_touches_is_declared() {
        for (file, script) in SOURCES {
            for (line, text) in code(script) {
                // A companion's name is the lease key and a suffix that
                // starts with `:`.
                let derives = text.match_indices("..").any(|(at, _)| {
                    let after = text[at + 2..].trim_start();
                    after.starts_with("':") || after.starts_with("\":")
                });
                assert!(
                    !derives,
                    "{file}:{line} builds a key name instead of being sent it: {text:?}"
                );
            }
        }
    }

    // The keys each call sends are the ones its script reads, in number:
    // one more would cost every call, one fewer leaves `KEYS[n]` nil.
    #[test]
    fn each_script_is_sent_as_many_keys_as_it_reads() {
        let scripts = Scripts::new("PUBLISH", "released");
        for (file, script) in SOURCES {
            let highest = code(script)
                .flat_map(|(_, text)| text.match_indices("KEYS[").map(move |(at, _)| &text[at + 5..]))
                .filter_map(|rest| rest.split(']').next()?.parse::<usize>().ok())
                .max()
                .unwrap_or(0);
            let sent = scripts.keys_of(file);
            assert_eq!(sent, highest, "{file} reads KEYS[{highest}] and is sent {sent} keys");
        }
    }

    #[test]
    fn a_lua_literal_escapes_every_byte() {
        assert_eq!(lua_string(":a"), r#""\058\097""#);
        let hostile = "x\"]] \\\n'é7";
        let literal = lua_string(hostile);
        let inner = &literal[1..literal.len() - 1];
        assert_eq!(inner.len(), 4 * hostile.len(), "{literal}");
        // Decoded back, escape by escape, it is the text given.
        let bytes: Vec<u8> = inner
            .as_bytes()
            .chunks(4)
            .map(|escape| {
                assert_eq!(escape[0], b'\\', "{literal}");
                std::str::from_utf8(&escape[1..])
                    .expect("digits")
                    .parse()
                    .expect("a byte")
            })
            .collect();
        assert_eq!(bytes, hostile.as_bytes());
    }

    #[test]
    fn each_setting_makes_its_own_announcing_scripts() {
        let plain = Scripts::new("PUBLISH", "lock-core:released");
        let sharded = Scripts::new("SPUBLISH", "lock-core:released");
        let other = Scripts::new("PUBLISH", "billing:released");
        assert_ne!(plain.release.get_hash(), sharded.release.get_hash());
        assert_ne!(plain.release.get_hash(), other.release.get_hash());
        assert_ne!(
            plain.force_release.get_hash(),
            other.force_release.get_hash()
        );
        // The acquire announces a fenced name's new holder; a writer's
        // withdrawal, that readers may get in.
        assert_ne!(plain.acquire.get_hash(), other.acquire.get_hash());
        assert_ne!(plain.withdraw.get_hash(), other.withdraw.get_hash());
        // The others do not depend on them.
        assert_eq!(plain.extend.get_hash(), other.extend.get_hash());
        assert_eq!(plain.holder.get_hash(), other.holder.get_hash());
    }
}
