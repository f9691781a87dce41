//! The attribute's durations and name templates: see `lock_core::__fuzz::check_duration` and `check_template`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    lock_core::__fuzz::check_duration(data);
    lock_core::__fuzz::check_template(data);
});
