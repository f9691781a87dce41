//! Owner tokens and the etcd store's keys: see `lock_core::__fuzz::check_stored_keys`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    lock_core::__fuzz::check_stored_keys(data);
});
