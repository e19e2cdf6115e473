//! Conversions between values and their names, written once for every type read from text.
//!
//! A type read by its [`FromStr`](std::str::FromStr) from flags and config files alike (serde's
//! `try_from = "String"`) gets its `TryFrom<String>` from [`try_from_string!`]; a fieldless
//! enum gets all of `FromStr`, `TryFrom<String>` and `Display` from one table of its names
//! through [`name_table!`], so parsing, printing and the error message's list cannot disagree.

/// `impl TryFrom<String>` by the type's `FromStr` (what serde's `try_from = "String"` calls),
/// and with `into String`, `impl From<T> for String` by its `Display` (serde's `into`).
macro_rules! try_from_string {
    ($ty:ty) => {
        impl TryFrom<String> for $ty {
            type Error = $crate::error::Error;
            fn try_from(s: String) -> $crate::Result<Self> {
                s.parse()
            }
        }
    };
    ($ty:ty, into String) => {
        $crate::names::try_from_string!($ty);

        impl From<$ty> for String {
            fn from(value: $ty) -> String {
                value.to_string()
            }
        }
    };
}

/// Names in words, as a `&'static str`: `a`, `a or b`, `a, b or c`.
macro_rules! or_list {
    ($a:literal) => {
        $a
    };
    ($a:literal, $b:literal) => {
        concat!($a, " or ", $b)
    };
    ($a:literal, $($rest:literal),+) => {
        concat!($a, ", ", $crate::names::or_list!($($rest),+))
    };
}

/// Names as a command line's value name, as a `&'static str`: `a|b|c`.
macro_rules! pipe_list {
    ($a:literal $(, $rest:literal)*) => {
        concat!($a $(, "|", $rest)*)
    };
}

/// `FromStr`, `TryFrom<String>` and `Display` of a fieldless enum from one table: each variant
/// with its name (what `Display` writes, serde's kebab-case name) and the aliases also read,
/// the names listed for help texts (`NAMES`: `a, b or c`; `CHOICES`: `a|b|c`) and the table
/// itself (`TABLE`: each name with its aliases, for the Python binding to list).
/// `any case` reads names in any case; `exact case` only as written. An unknown name is
/// [`Error::InvalidValue`](crate::error::Error::InvalidValue) listing the names (not the
/// aliases).
macro_rules! name_table {
    ($ty:ident, $what:literal, $case:ident case, {
        $($variant:ident => $name:literal $(| $alias:literal)*),+ $(,)?
    }) => {
        impl std::str::FromStr for $ty {
            type Err = $crate::error::Error;
            fn from_str(s: &str) -> $crate::Result<Self> {
                match $crate::names::name_table!(@key $case, s) {
                    $($name $(| $alias)* => Ok($ty::$variant),)+
                    _ => Err($crate::error::Error::InvalidValue {
                        what: $what,
                        value: s.to_string(),
                        expected: $crate::names::or_list!($($name),+),
                    }),
                }
            }
        }

        $crate::names::try_from_string!($ty);

        impl $ty {
            /// The names, in words (`a, b or c`), for help texts and messages.
            pub const NAMES: &'static str = $crate::names::or_list!($($name),+);
            /// The names as a command line's value name (`a|b|c`).
            pub const CHOICES: &'static str = $crate::names::pipe_list!($($name),+);
            /// Each name with the aliases also read, in the table's order.
            pub const TABLE: &'static [(&'static str, &'static [&'static str])] =
                &[$(($name, &[$($alias),*])),+];
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(match self {
                    $($ty::$variant => $name,)+
                })
            }
        }
    };
    (@key any, $s:ident) => {
        $s.to_ascii_lowercase().as_str()
    };
    (@key exact, $s:ident) => {
        $s
    };
}

pub(crate) use {name_table, or_list, pipe_list, try_from_string};

#[cfg(test)]
mod tests {
    use crate::format::{Overflow, Rounding};
    use crate::recipe::Accumulation;
    use crate::train::config::ModelKind;

    /// Every name reads back as its value; the message lists the names in words.
    fn check<T>(all: &[T], names: &[&str], expected: &str)
    where
        T: std::str::FromStr<Err = crate::Error> + TryFrom<String, Error = crate::Error>,
        T: std::fmt::Display + PartialEq + std::fmt::Debug,
    {
        for (value, name) in all.iter().zip(names) {
            assert_eq!(value.to_string(), *name);
            assert_eq!(&name.parse::<T>().unwrap(), value);
            assert_eq!(&T::try_from(name.to_string()).unwrap(), value);
        }
        let e = "nope".parse::<T>().unwrap_err().to_string();
        assert!(e.contains("'nope'") && e.contains(expected), "{e}");
    }

    #[test]
    fn tables_read_print_and_list_their_names() {
        let modes = ["nearest-even", "toward-zero", "up", "down", "stochastic"];
        check(
            &Rounding::ALL,
            &modes,
            "nearest-even, toward-zero, up, down or stochastic",
        );
        let rules = [Overflow::Ieee, Overflow::Saturate];
        check(&rules, &["ieee", "saturate"], "ieee or saturate");
        let sums = [Accumulation::Fp32, Accumulation::Storage];
        check(&sums, &["fp32", "storage"], "fp32 or storage");
        // The help texts' lists come from the same tables.
        assert_eq!(
            Rounding::NAMES,
            "nearest-even, toward-zero, up, down or stochastic"
        );
        assert_eq!(Overflow::CHOICES, "ieee|saturate");
        assert_eq!(Accumulation::CHOICES, "fp32|storage");
        assert_eq!(ModelKind::NAMES, "mlp, cnn, lstm or gan");
        let models = [
            ModelKind::Mlp,
            ModelKind::Cnn,
            ModelKind::Lstm,
            ModelKind::Gan,
        ];
        check(
            &models,
            &["mlp", "cnn", "lstm", "gan"],
            "mlp, cnn, lstm or gan",
        );
    }

    #[test]
    fn aliases_and_case_follow_the_table() {
        assert_eq!("RNE".parse::<Rounding>().unwrap(), Rounding::NearestEven);
        assert_eq!(
            "Truncate".parse::<Rounding>().unwrap(),
            Rounding::TowardZero
        );
        assert_eq!("SATURATE".parse::<Overflow>().unwrap(), Overflow::Saturate);
        assert!("MLP".parse::<ModelKind>().is_err());
        assert!("Fp32".parse::<Accumulation>().is_err());
    }

    #[test]
    fn the_table_lists_every_name_and_alias_it_reads() {
        assert_eq!(Overflow::TABLE, [("ieee", &[][..]), ("saturate", &[][..])]);
        assert_eq!(Rounding::TABLE.len(), Rounding::ALL.len());
        for (&(name, aliases), mode) in Rounding::TABLE.iter().zip(Rounding::ALL) {
            assert_eq!(name, mode.to_string());
            for alias in aliases {
                assert_eq!(alias.parse::<Rounding>().unwrap(), mode, "{alias}");
            }
        }
        let aliases: Vec<&str> = Rounding::TABLE.iter().flat_map(|t| t.1).copied().collect();
        assert_eq!(
            aliases,
            ["nearest", "rne", "rz", "truncate", "ru", "rd", "sr"]
        );
    }
}
