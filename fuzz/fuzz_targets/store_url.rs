//! Store URLs read and written back, and their redaction: see `lock_core::__fuzz::check_store_url` and `check_redaction`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    lock_core::__fuzz::check_store_url(data);
    lock_core::__fuzz::check_redaction(data);
});
