//! Owner tokens: how they are made, and the one place that knows their
//! format.
//!
//! A token is what a store keeps as the lease's value, and the only proof of
//! ownership release and extend accept: 128 bits in hex, followed by a
//! readable description of the holder:
//!
//! ```text
//! 3f9c0e0d6b1a4e52a1c7d29e55e0b8f4@web-7:4242
//! └──────────── 128 bits ────────┘ └ host:pid
//! ```
//!
//! The 128 bits are this process's secret, drawn once from a CSPRNG seeded
//! by the operating system, plus a count of the tokens made before (each
//! thread counts in a range of its own). So every token is unique (no two
//! acquisitions of this process share one, and another process would need
//! to draw the same 128-bit secret), and no other process can produce one
//! without having read one from the store first, which already lets it do
//! anything the token allows. Drawing 128 fresh random bits per acquire
//! gave no more than that and cost more than the rest of an in-memory
//! acquire. The description lets [`Holder::owner`](crate::Holder::owner)
//! say who holds a lock.

use std::sync::{Arc, OnceLock};

/// Length of the random part of a token, in hex digits (128 bits).
pub(crate) const RANDOM_HEX_LEN: usize = 32;

/// `host:pid` of this process, computed once.
pub(crate) fn description_of_this_process() -> &'static str {
    static DESCRIPTION: OnceLock<String> = OnceLock::new();
    DESCRIPTION.get_or_init(|| {
        let host = gethostname::gethostname();
        let host = host.to_string_lossy();
        let host = if host.is_empty() {
            "unknown-host"
        } else {
            &host
        };
        format!("{host}:{}", std::process::id())
    })
}

/// The next 128 bits for a token of this thread: the process's secret plus
/// a count that is unique across the process (the high 64 bits number the
/// thread, the low 64 its tokens).
fn next_bits() -> u128 {
    use std::cell::Cell;
    use std::sync::atomic::{AtomicU64, Ordering};
    static SECRET: OnceLock<u128> = OnceLock::new();
    static THREADS: AtomicU64 = AtomicU64::new(0);
    thread_local! {
        static NEXT: Cell<Option<u128>> = const { Cell::new(None) };
    }
    NEXT.with(|next| {
        let count = next
            .get()
            .unwrap_or_else(|| u128::from(THREADS.fetch_add(1, Ordering::Relaxed)) << 64);
        next.set(Some(count.wrapping_add(1)));
        count.wrapping_add(*SECRET.get_or_init(rand::random))
    })
}

/// Each byte's two hex digits.
const HEX_PAIRS: [[u8; 2]; 256] = {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut pairs = [[0u8; 2]; 256];
    let mut byte = 0;
    while byte < 256 {
        pairs[byte] = [HEX[byte >> 4], HEX[byte & 0xf]];
        byte += 1;
    }
    pairs
};

/// Runs `f` on this thread's scratch string, empty, for assembling a
/// string that is then copied into its one lasting allocation (an
/// `Arc<str>`): pieces that are already `str` are appended as they are, with
/// no second allocation and no UTF-8 check of the whole.
///
/// On a fresh string instead when the scratch one is busy (`f` asked for it
/// again) or already gone (a thread-local destructor running at thread exit).
pub(crate) fn with_scratch<T>(f: impl Fn(&mut String) -> T) -> T {
    use std::cell::RefCell;
    thread_local! {
        static SCRATCH: RefCell<String> = const { RefCell::new(String::new()) };
    }
    SCRATCH
        .try_with(|scratch| match scratch.try_borrow_mut() {
            Ok(mut scratch) => {
                scratch.clear();
                f(&mut scratch)
            }
            Err(_) => f(&mut String::new()),
        })
        .unwrap_or_else(|_| f(&mut String::new()))
}

/// A fresh owner token: 128 bits in hex, `@`, then `host:pid`.
///
/// Hand-encoded rather than through `format!`: this runs on every acquire,
/// and the formatting machinery costs more than the rest of an in-memory
/// acquire.
pub(crate) fn new_token() -> Arc<str> {
    new_token_described(description_of_this_process())
}

/// A fresh owner token whose readable part is `description` rather than
/// this process's `host:pid`: an election candidate's label (see
/// [`Election::label`](crate::Election::label)).
pub(crate) fn new_token_described(description: &str) -> Arc<str> {
    // Assembled on the stack when it fits, so the only allocation is the
    // shared `Arc<str>` the guard and the running work's lease both hold.
    let mut buffer = [0u8; 160];
    let len = RANDOM_HEX_LEN + 1 + description.len();
    let bits = next_bits().to_be_bytes();
    if let Some(out) = buffer.get_mut(..len) {
        for (pair, byte) in out[..RANDOM_HEX_LEN].chunks_exact_mut(2).zip(bits) {
            pair.copy_from_slice(&HEX_PAIRS[usize::from(byte)]);
        }
        out[RANDOM_HEX_LEN] = b'@';
        out[RANDOM_HEX_LEN + 1..].copy_from_slice(description.as_bytes());
        // Hex digits, `@` and a whole string: valid UTF-8, never the fallback.
        if let Ok(token) = std::str::from_utf8(out) {
            return Arc::from(token);
        }
    }
    let random: String = bits.iter().map(|byte| format!("{byte:02x}")).collect();
    Arc::from(format!("{random}@{description}"))
}

/// The random part of `token` when this process made it (it ends in this
/// process's own `@host:pid`); `None` for any other token.
pub(crate) fn own_random_part(token: &str) -> Option<[u8; RANDOM_HEX_LEN]> {
    let (random, rest) = token.as_bytes().split_at_checked(RANDOM_HEX_LEN)?;
    let description = rest.strip_prefix(b"@")?;
    if description != description_of_this_process().as_bytes() {
        return None;
    }
    random.try_into().ok()
}

/// The token whose random part is `random` and which this process made: the
/// inverse of [`own_random_part`].
pub(crate) fn own_token(random: &[u8; RANDOM_HEX_LEN]) -> String {
    let description = description_of_this_process();
    let mut token = String::with_capacity(RANDOM_HEX_LEN + 1 + description.len());
    // `own_random_part` only keeps bytes that ended right before an ASCII
    // `@`, so they are whole UTF-8 characters.
    token.push_str(&String::from_utf8_lossy(random));
    token.push('@');
    token.push_str(description);
    token
}

/// The readable `host:pid` part of `token` when this crate made it (32 hex
/// digits, `@`, the description); the whole value for anything else.
pub(crate) fn owner_of(token: &str) -> &str {
    match token.split_once('@') {
        Some((random, description)) if random.len() == RANDOM_HEX_LEN => description,
        _ => token,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn a_token_carries_128_random_bits_and_says_which_process_made_it() {
        let token = new_token();
        let (random, who) = token.split_once('@').expect("token has an @");
        assert_eq!(random.len(), 32, "128 bits are 32 hex digits: {token}");
        assert!(
            random.bytes().all(|b| b.is_ascii_hexdigit()),
            "random part must be hex: {token}"
        );
        assert!(
            who.ends_with(&format!(":{}", std::process::id())),
            "description must end with our pid: {token}"
        );
    }

    #[test]
    fn tokens_do_not_repeat_within_or_across_threads() {
        let mut tokens: HashSet<Arc<str>> = (0..10_000).map(|_| new_token()).collect();
        let others: Vec<Vec<Arc<str>>> = (0..4)
            .map(|_| std::thread::spawn(|| (0..10_000).map(|_| new_token()).collect()))
            .map(|thread| thread.join().expect("thread"))
            .collect();
        for token in others.into_iter().flatten() {
            assert!(tokens.insert(token), "a token repeated across threads");
        }
        assert_eq!(tokens.len(), 50_000, "every token must be unique");
    }

    #[test]
    fn an_own_token_round_trips_through_its_random_part() {
        let token = new_token();
        let random = own_random_part(&token).expect("made by this process");
        assert_eq!(own_token(&random), &*token);
        assert_eq!(own_random_part("someone-else"), None);
        let other_process = format!("{}@elsewhere:1", &token[..32]);
        assert_eq!(
            own_random_part(&other_process),
            None,
            "another process's token is not ours"
        );
    }
}
