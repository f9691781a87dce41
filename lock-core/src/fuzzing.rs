//! The properties the fuzz targets check, for the parsers that read text
//! from users or bytes from a server: store URLs and their redaction,
//! libpq's `key=value` strings, memcached's replies, the keys and replies
//! the etcd and Redis stores decode, and the attribute's durations and
//! name templates.
//!
//! Each `check_*` function takes any bytes and panics when a property
//! fails. The targets in the repository's `fuzz/` folder call them under
//! libFuzzer; this crate's unit tests call them over the seed inputs in
//! `fuzz/seeds/` and a few thousand generated inputs, so every test run
//! checks the same properties for a bounded time.
//!
//! Not part of the API: it is compiled for the tests, and with the hidden
//! `__fuzz` feature for the fuzz targets, which reach it as `__fuzz`.

// Reached from outside only through `__fuzz`, with its feature.
#![cfg_attr(not(feature = "__fuzz"), allow(unreachable_pub))]
// `cfg(fuzzing)` is set by `cargo fuzz`, not by Cargo's features.
#![allow(unexpected_cfgs)]

// The attribute's parsers are files of the lock-macros crate, compiled
// here as they are: only for the tests and under `cargo fuzz` (which sets
// `cfg(fuzzing)`), never in a build of the published crate, which does not
// hold them.
#[cfg(any(test, fuzzing))]
mod macros;
#[cfg(feature = "memcached")]
mod memcached;
#[cfg(feature = "redis")]
mod redis;
mod stored;
#[cfg(test)]
mod tests;
mod urls;

#[cfg(any(test, fuzzing))]
pub use self::macros::{check_duration, check_template};
#[cfg(feature = "memcached")]
pub use self::memcached::check_memcached_replies;
#[cfg(feature = "redis")]
pub use self::redis::check_redis_replies;
pub use self::stored::check_stored_keys;
pub use self::urls::{check_conninfo, check_redaction, check_store_url};

/// Fuzz bytes read as a sequence of choices; past the end every choice is
/// 0, so any input is a whole case.
pub(crate) struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Self {
        Input(data)
    }

    /// The next byte, or 0.
    pub(crate) fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&first, rest)) => {
                self.0 = rest;
                first
            }
            None => 0,
        }
    }

    /// A number below `n` (which must not be 0).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        usize::from(self.byte()) % n
    }

    /// A 32-bit number.
    // Used by the stores' checks, which their features build.
    #[cfg_attr(not(any(feature = "memcached", feature = "redis")), allow(dead_code))]
    pub(crate) fn number(&mut self) -> u32 {
        u32::from_le_bytes([self.byte(), self.byte(), self.byte(), self.byte()])
    }

    /// Up to `most` bytes, the count chosen by the input.
    pub(crate) fn bytes(&mut self, most: usize) -> &'a [u8] {
        let len = self.below(most + 1).min(self.0.len());
        let (taken, rest) = self.0.split_at(len);
        self.0 = rest;
        taken
    }

    /// Up to `most` bytes read as text (invalid UTF-8 replaced).
    pub(crate) fn text(&mut self, most: usize) -> String {
        String::from_utf8_lossy(self.bytes(most)).into_owned()
    }

    /// Everything left.
    #[cfg_attr(not(any(feature = "memcached", feature = "etcd")), allow(dead_code))]
    pub(crate) fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.0)
    }
}

/// Runs `future` to its end with every byte it reads at hand: it must not
/// wait, and a future that does is a hang.
#[cfg(feature = "memcached")]
pub(crate) fn run_ready<F: std::future::Future>(future: F) -> F::Output {
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    let mut future = std::pin::pin!(future);
    match future.as_mut().poll(&mut context) {
        std::task::Poll::Ready(output) => output,
        std::task::Poll::Pending => {
            panic!("it waited for more with every byte at hand: it would hang on a live connection")
        }
    }
}
