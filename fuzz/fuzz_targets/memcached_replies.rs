//! A memcached's replies to a batch of requests: see `lock_core::__fuzz::check_memcached_replies`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    lock_core::__fuzz::check_memcached_replies(data);
});
