//! The value parsers of command-line flags, for clap's `value_parser`: the library's flag
//! structs ([`crate::train::config::Overrides`]) and the binary's commands share them, so a flag
//! refuses a bad value in the same words wherever it appears.

use std::str::FromStr;

/// A whole number of 0 or more, for clap (which adds the flag and the value to the message):
/// a negative one, a fraction or a word is named for what it is, not as an "invalid digit".
/// Flags using it set `allow_negative_numbers`, so that `--steps -1` reaches it instead of
/// being taken for an unknown flag.
///
/// # Errors
/// The reason the value is not a whole number of 0 or more that fits `T`.
pub fn whole<T: FromStr>(s: &str) -> Result<T, String> {
    s.trim().parse().map_err(|_| {
        match s.trim().parse::<f64>() {
            Ok(x) if x < 0.0 => "a negative number: expected a whole number, 0 or more",
            Ok(x) if x.fract() != 0.0 => "a fraction: expected a whole number, 0 or more",
            Ok(_) => "too large",
            Err(_) => "expected a whole number, 0 or more",
        }
        .to_string()
    })
}

/// A value read by its `FromStr`, for clap (which adds the flag to the library's message).
///
/// # Errors
/// The library's message for a value `T` does not read.
pub fn parse<T: FromStr<Err = crate::Error>>(s: &str) -> Result<T, String> {
    s.parse().map_err(|e: crate::Error| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_whole_number_is_named_for_what_it_is() {
        assert_eq!(whole::<u64>(" 12 "), Ok(12));
        let err = |s| whole::<u8>(s).unwrap_err();
        assert_eq!(
            err("-1"),
            "a negative number: expected a whole number, 0 or more"
        );
        assert_eq!(err("1.5"), "a fraction: expected a whole number, 0 or more");
        assert_eq!(err("256"), "too large");
        assert_eq!(err("ten"), "expected a whole number, 0 or more");
        let e = parse::<crate::format::Rounding>("nearest-odd").unwrap_err();
        assert!(e.contains("nearest-odd"), "{e}");
    }
}
