//! The Redis holder script's replies and lease keys: see `lock_core::__fuzz::check_redis_replies`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    lock_core::__fuzz::check_redis_replies(data);
});
