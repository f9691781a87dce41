//! libpq's `key=value` strings and PostgreSQL URLs: see `lock_core::__fuzz::check_conninfo`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    lock_core::__fuzz::check_conninfo(data);
});
