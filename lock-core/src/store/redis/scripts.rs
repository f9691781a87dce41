//! The Lua scripts behind every operation, and how they are sent.
//!
//! Each script lives in `lua/` next to this file, with its KEYS, ARGV and
//! reply described at its top. They are sent by SHA1 (`EVALSHA`), loaded
//! when the store connects, and reloaded once, within the call's deadline,
//! when a server that restarted or flushed its cache answers `NOSCRIPT`.

use ::redis::{Cmd, Script};

use super::keys::KeyArg;

/// The scripts, compiled (hashed) once per store.
pub(super) struct Scripts {
    pub(super) acquire: Script,
    pub(super) release: Script,
    pub(super) extend: Script,
    pub(super) force_release: Script,
    pub(super) holder: Script,
}

impl Scripts {
    pub(super) fn new() -> Self {
        Scripts {
            acquire: Script::new(include_str!("lua/acquire.lua")),
            release: Script::new(include_str!("lua/release.lua")),
            extend: Script::new(include_str!("lua/extend.lua")),
            force_release: Script::new(include_str!("lua/force_release.lua")),
            holder: Script::new(include_str!("lua/holder.lua")),
        }
    }

    /// Every script, to load them all when the store connects.
    pub(super) fn all(&self) -> [&Script; 5] {
        [
            &self.acquire,
            &self.release,
            &self.extend,
            &self.force_release,
            &self.holder,
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
