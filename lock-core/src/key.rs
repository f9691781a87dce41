//! The store keys of a lock: its prefix and name joined (reusing each
//! thread's most recent keys), and the keys of a semaphore's permits.

use std::sync::Arc;

/// How many of its most recently joined keys each thread keeps for reuse.
const RECENT_KEYS: usize = 4;

/// `prefix` followed by `name`, in one shared allocation.
///
/// This runs for every `#[locked]` call, and most locked functions have a
/// fixed name, so each call would allocate the same key and free it again.
/// Each thread keeps the last few keys it joined, each with the prefix it
/// was joined from, and hands out another reference to an equal one
/// instead: a comparison of the name instead of an allocation and a free.
/// The prefix is recognised by its allocation, which the kept reference
/// holds, so it cannot be freed and reused for another prefix meanwhile. A
/// key that is not among them costs what it did without the reuse (the
/// evicted one is freed when nothing else holds it).
#[inline]
pub(crate) fn joined(prefix: &Arc<str>, name: &str) -> Arc<str> {
    use std::cell::RefCell;
    type Recent = ([Option<(Arc<str>, Arc<str>)>; RECENT_KEYS], usize);
    thread_local! {
        static RECENT: RefCell<Recent> = const { RefCell::new(([const { None }; RECENT_KEYS], 0)) };
    }
    let fresh = || {
        crate::token::with_scratch(|scratch| {
            scratch.push_str(prefix);
            scratch.push_str(name);
            Arc::<str>::from(scratch.as_str())
        })
    };
    // Without reuse when the keys are already gone (a thread-local
    // destructor building a lock at thread exit).
    let reused = RECENT.try_with(|recent| {
        // Only busy if `fresh` re-entered this function; never the case.
        let Ok(mut recent) = recent.try_borrow_mut() else {
            return fresh();
        };
        let (keys, next) = &mut *recent;
        let found = keys
            .iter()
            .flatten()
            .find(|(from, key)| Arc::ptr_eq(from, prefix) && key.get(prefix.len()..) == Some(name));
        if let Some((_, key)) = found {
            return Arc::clone(key);
        }
        let key = fresh();
        keys[*next] = Some((Arc::clone(prefix), Arc::clone(&key)));
        *next = (*next + 1) % RECENT_KEYS;
        key
    });
    reused.unwrap_or_else(|_| fresh())
}

/// The store key of permit `slot` of the lock keyed `key`: `key` itself for
/// the first, `key` followed by `#permit-<slot>` for the others.
pub(crate) fn permit_key(key: &Arc<str>, slot: u32) -> Arc<str> {
    if slot == 0 {
        Arc::clone(key)
    } else {
        Arc::from(format!("{key}#permit-{slot}"))
    }
}

/// Whether `key` has the form of a semaphore's permit key,
/// `<key>#permit-<n>` (see [`permit_key`]).
#[inline]
pub(crate) fn is_permit_key(key: &str) -> bool {
    let digits = key.bytes().rev().take_while(u8::is_ascii_digit).count();
    digits > 0 && key[..key.len() - digits].ends_with("#permit-")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_joined_key_is_reused_only_for_the_same_prefix_and_name() {
        let prefix: Arc<str> = Arc::from("app:");
        let first = joined(&prefix, "reports");
        assert_eq!(&*first, "app:reports");
        assert!(
            Arc::ptr_eq(&first, &joined(&prefix, "reports")),
            "the same prefix and name share one key"
        );
        // Equal text, another prefix: a key of its own, still right.
        let other: Arc<str> = Arc::from("app:");
        let elsewhere = joined(&other, "reports");
        assert_eq!(&*elsewhere, "app:reports");
        assert!(!Arc::ptr_eq(&first, &elsewhere));
        // Names that begin one another stay apart, and more names than a
        // thread keeps all come out right.
        let names = ["r", "re", "reports:1", "reports", "x", "", "reports"];
        for _ in 0..3 {
            for name in names {
                assert_eq!(&*joined(&prefix, name), format!("app:{name}"));
            }
        }
    }

    #[test]
    fn a_key_is_joined_from_a_thread_local_destructor() {
        // Built first, so destroyed after the kept keys and the scratch
        // string: the lock is built when both are already gone.
        struct AtExit(std::sync::mpsc::Sender<String>);
        impl Drop for AtExit {
            fn drop(&mut self) {
                let prefix: Arc<str> = Arc::from("exit:");
                let _ = self.0.send(joined(&prefix, "late").to_string());
            }
        }
        thread_local! {
            static AT_EXIT: std::cell::RefCell<Option<AtExit>> = const { std::cell::RefCell::new(None) };
        }
        let (send, keys) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            AT_EXIT.with(|slot| *slot.borrow_mut() = Some(AtExit(send)));
            let prefix: Arc<str> = Arc::from("exit:");
            assert_eq!(&*joined(&prefix, "early"), "exit:early");
        })
        .join()
        .expect("the thread and its destructors end without a panic");
        assert_eq!(keys.recv().as_deref(), Ok("exit:late"));
    }
}
