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
