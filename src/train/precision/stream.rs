//! The stochastic-rounding stream: the position of each stored value in the recipe's stream of
//! random bits, rewound after a pass that must leave training as it was.

/// The next position, and the one saved by [`Stream::pause`].
#[derive(Debug, Default)]
pub(super) struct Stream {
    position: u64,
    paused: u64,
}

impl Stream {
    /// The positions of the next `len` values: returns the first, and moves past them.
    pub(super) fn take(&mut self, len: usize) -> u64 {
        let start = self.position;
        self.position = start.wrapping_add(len as u64);
        start
    }

    /// Saves the position (an evaluation pass begins).
    pub(super) fn pause(&mut self) {
        self.paused = self.position;
    }

    /// Returns to the position saved by [`Stream::pause`].
    pub(super) fn resume(&mut self) {
        self.position = self.paused;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_follow_each_other_and_a_paused_pass_is_rewound() {
        let mut s = Stream::default();
        assert_eq!([s.take(3), s.take(0), s.take(5)], [0, 3, 3]);
        s.pause();
        assert_eq!(s.take(100), 8);
        s.resume();
        assert_eq!(s.take(1), 8);
        let mut end = Stream {
            position: u64::MAX,
            paused: 0,
        };
        assert_eq!([end.take(2), end.take(1)], [u64::MAX, 1]);
    }
}
