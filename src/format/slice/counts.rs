//! What rounding a slice did, counted.

use std::ops::{Add, AddAssign};

use serde::{Deserialize, Serialize};

use crate::format::Event;

/// How many values of a slice each rounding event touched.
///
/// Zeros and values that rounded to normal numbers are not counted (they are the rest).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RoundCounts {
    /// Nonzero finite inputs that became zero.
    pub underflow: u64,
    /// Nonzero results below the smallest normal (kept with reduced precision).
    pub subnormal: u64,
    /// Finite inputs whose rounded magnitude exceeded the largest finite value.
    pub overflow: u64,
    /// NaN inputs.
    pub nan: u64,
    /// Infinite inputs.
    pub infinite: u64,
}

impl RoundCounts {
    /// Counts one event.
    pub fn record(&mut self, event: Event) {
        match event {
            Event::Normal => {}
            Event::Underflow => self.underflow += 1,
            Event::Subnormal => self.subnormal += 1,
            Event::Overflow => self.overflow += 1,
            Event::Nan => self.nan += 1,
            Event::Infinite => self.infinite += 1,
        }
    }
}

impl Add for RoundCounts {
    type Output = RoundCounts;
    fn add(self, o: RoundCounts) -> RoundCounts {
        RoundCounts {
            underflow: self.underflow + o.underflow,
            subnormal: self.subnormal + o.subnormal,
            overflow: self.overflow + o.overflow,
            nan: self.nan + o.nan,
            infinite: self.infinite + o.infinite,
        }
    }
}

impl AddAssign for RoundCounts {
    fn add_assign(&mut self, o: RoundCounts) {
        *self = *self + o;
    }
}
