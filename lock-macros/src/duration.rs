//! Durations written as string literals: `"250ms"`, `"2s"`, `"10m"`, `"1h 30m"`.
//!
//! A duration is one or more `<whole number><unit>` groups, optionally
//! separated by spaces, added together. Units: `ns`, `us` (or `µs`), `ms`,
//! `s`, `m`, `h`, `d`. Everything is checked here, at compile time, so a typo
//! in a TTL never reaches production as a panic or a surprising lease.

use std::time::Duration;

/// Nanoseconds per unit, for every unit a duration may use.
const UNITS: &[(&str, u128)] = &[
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60 * 1_000_000_000),
    ("h", 60 * 60 * 1_000_000_000),
    ("d", 24 * 60 * 60 * 1_000_000_000),
];

/// Spellings people reach for, and the unit they meant.
const ALIASES: &[(&[&str], &str)] = &[
    (&["nsec", "nanos", "nanosecond", "nanoseconds"], "ns"),
    (&["usec", "micros", "microsecond", "microseconds"], "us"),
    (&["msec", "millis", "millisecond", "milliseconds"], "ms"),
    (&["sec", "secs", "second", "seconds"], "s"),
    (&["min", "mins", "minute", "minutes"], "m"),
    (&["hr", "hrs", "hour", "hours"], "h"),
    (&["day", "days"], "d"),
];

/// Parses a duration, or says what is wrong with it and how to write it.
pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    if text.trim().is_empty() {
        return Err(
            "a duration cannot be empty: write a number and a unit, like \"30s\", \"250ms\" or \"1h 30m\""
                .to_owned(),
        );
    }
    let mut total: u128 = 0;
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        if rest.starts_with('-') {
            return Err(format!(
                "a duration cannot be negative: write how long, like \"{}\"",
                rest.trim_start_matches('-')
            ));
        }
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            return Err(format!(
                "expected a number at `{rest}` in \"{text}\": write durations like \"30s\" or \"1h 30m\""
            ));
        }
        let (number, after) = rest.split_at(digits);
        if after.starts_with(['.', ',']) {
            return Err(format!(
                "fractions are not supported in \"{text}\": use a smaller unit, like \"1s 500ms\" for one and a half seconds"
            ));
        }
        let after = after.trim_start();
        let unit_len = after.len() - after.trim_start_matches(|c: char| c.is_alphabetic()).len();
        let (unit, after) = after.split_at(unit_len);
        if unit.is_empty() {
            return Err(format!(
                "`{number}` in \"{text}\" has no unit: write \"{number}s\" for seconds, or use ns, us, ms, m, h or d"
            ));
        }
        let per_unit = unit_nanos(unit).ok_or_else(|| unknown_unit(unit, text))?;
        let too_long = || {
            format!(
                "\"{text}\" is too long: a duration holds at most {} seconds (about 584 billion years); a lease that long is never meant, so use a ttl the work can finish in",
                u64::MAX
            )
        };
        let value: u128 = number.parse().map_err(|_| too_long())?;
        total = value
            .checked_mul(per_unit)
            .and_then(|nanos| total.checked_add(nanos))
            .ok_or_else(too_long)?;
        if total > Duration::MAX.as_nanos() {
            return Err(too_long());
        }
        rest = after.trim_start();
    }
    let secs =
        u64::try_from(total / 1_000_000_000).map_err(|_| format!("\"{text}\" is too long"))?;
    let nanos = u32::try_from(total % 1_000_000_000).unwrap_or_default();
    Ok(Duration::new(secs, nanos))
}

fn unit_nanos(unit: &str) -> Option<u128> {
    UNITS
        .iter()
        .find(|(name, _)| *name == unit)
        .map(|(_, nanos)| *nanos)
}

fn unknown_unit(unit: &str, text: &str) -> String {
    let lower = unit.to_lowercase();
    let meant = ALIASES
        .iter()
        .find(|(spellings, _)| spellings.contains(&lower.as_str()))
        .map(|(_, unit)| *unit)
        .or_else(|| {
            UNITS
                .iter()
                .map(|(name, _)| *name)
                .find(|name| *name == lower)
        });
    match meant {
        Some(meant) => format!("unknown unit `{unit}` in \"{text}\": write `{meant}`"),
        None => format!("unknown unit `{unit}` in \"{text}\": use ns, us, ms, s, m, h or d"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> Duration {
        match parse(text) {
            Ok(duration) => duration,
            Err(message) => panic!("{text:?} should parse, got: {message}"),
        }
    }

    fn err(text: &str) -> String {
        match parse(text) {
            Ok(duration) => panic!("{text:?} should be refused, got {duration:?}"),
            Err(message) => message,
        }
    }

    // The forms the docs promise must keep working: they are in user code.
    #[test]
    fn every_documented_form_parses_to_the_duration_it_names() {
        assert_eq!(ok("250ms"), Duration::from_millis(250), "milliseconds");
        assert_eq!(ok("2s"), Duration::from_secs(2), "seconds");
        assert_eq!(ok("10m"), Duration::from_secs(600), "minutes");
        assert_eq!(ok("1h 30m"), Duration::from_secs(5400), "groups add up");
        assert_eq!(
            ok("1h30m"),
            Duration::from_secs(5400),
            "spaces are optional"
        );
        assert_eq!(ok("1d"), Duration::from_secs(86_400), "days");
        assert_eq!(ok("7ns"), Duration::from_nanos(7), "nanoseconds");
        assert_eq!(ok("3us"), Duration::from_micros(3), "microseconds");
        assert_eq!(ok("3µs"), Duration::from_micros(3), "micro sign");
        assert_eq!(
            ok(" 1s 500ms "),
            Duration::from_millis(1500),
            "outer spaces"
        );
        assert_eq!(ok("0s"), Duration::ZERO, "zero parses; callers decide");
    }

    // Each refusal must say what to write instead, or users are left guessing.
    #[test]
    fn a_malformed_duration_is_refused_with_the_fix() {
        assert!(err("").contains("cannot be empty"), "empty");
        assert!(err("   ").contains("cannot be empty"), "blank");
        assert!(
            err("10x").contains("use ns, us, ms, s, m, h or d"),
            "unknown unit"
        );
        assert!(err("-1s").contains("cannot be negative"), "negative");
        assert!(err("10").contains("write \"10s\""), "missing unit");
        assert!(err("s").contains("expected a number"), "missing number");
        assert!(err("1.5s").contains("1s 500ms"), "fraction");
        assert!(
            err("1h -5m").contains("cannot be negative"),
            "negative later group"
        );
    }

    // Common long spellings get a precise suggestion rather than the unit list.
    #[test]
    fn a_long_unit_name_is_answered_with_its_short_form() {
        assert!(err("10sec").contains("write `s`"), "sec");
        assert!(err("5 minutes").contains("write `m`"), "minutes");
        assert!(err("2Hours").contains("write `h`"), "case-insensitive");
        assert!(err("1MS").contains("write `ms`"), "upper-case unit");
    }

    // Overflow must be an error, never a wrapped or saturated value.
    #[test]
    fn a_duration_beyond_what_fits_is_refused_as_too_long() {
        assert!(
            err("99999999999999999999999999999999999999999s").contains("too long"),
            "number overflow"
        );
        assert!(
            err("18446744073709551616s").contains("too long"),
            "u64::MAX + 1 seconds"
        );
        assert!(
            err("300000000000000d").contains("too long"),
            "unit multiplication overflow"
        );
        assert_eq!(
            ok("18446744073709551615s"),
            Duration::new(u64::MAX, 0),
            "the largest value fits"
        );
    }
}
