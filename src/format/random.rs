//! The counter-based random stream behind stochastic rounding.
//!
//! The bits for the value at position `index` depend only on `(seed, index)`, so results are
//! reproducible and do not depend on how a slice is split across threads or chunks.

/// The 32 random bits that stochastic rounding uses for the value at `index` of a stream.
///
/// ```text
/// key  = splitmix64(seed + hi32(index) * golden) as u32
/// bits = triple32(lo32(index) ^ key)
/// ```
/// `triple32` (Chris Wellons' integer hash) is a bijection on u32, so within each block of 2^32
/// positions every value appears exactly once.
#[must_use]
#[inline]
pub fn stochastic_bits(seed: u64, index: u64) -> u32 {
    mix(index as u32, block_key(seed, index >> 32))
}

/// The per-block key: constant over the 2^32 positions that share `hi`.
#[inline]
pub(crate) fn block_key(seed: u64, hi: u64) -> u32 {
    let mut z = seed.wrapping_add(hi.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) as u32
}

/// `triple32(lo ^ key)`; written on plain u32 so that it vectorises.
#[inline(always)]
pub(crate) fn mix(lo: u32, key: u32) -> u32 {
    let mut x = lo ^ key;
    x ^= x >> 17;
    x = x.wrapping_mul(0xed5a_d4bb);
    x ^= x >> 11;
    x = x.wrapping_mul(0xac4c_1b51);
    x ^= x >> 15;
    x = x.wrapping_mul(0x3184_8bab);
    x ^= x >> 14;
    x
}
