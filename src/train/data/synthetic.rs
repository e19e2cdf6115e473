//! Deterministic synthetic classification sets, drawn from [`crate::train::Rng`].

use ndarray::Array2;

use super::Dataset;
use crate::train::rng::Rng;

/// Examples per synthetic set (train + test); the first 2/3 are for training.
const TOTAL: usize = 1500;
const TRAIN: usize = 1000;

/// Gaussian blobs: 4 classes in 8 dimensions, centres drawn from N(0, 3²) per coordinate, points
/// N(centre, 1). Nearly separable: a linear model does well, so it is the easy baseline.
#[must_use]
pub fn blobs(seed: u64) -> Dataset {
    let (classes, dims) = (4, 8);
    let mut rng = Rng::derive(seed, 0xB10B);
    let centres: Vec<f64> = (0..classes * dims).map(|_| 3.0 * rng.normal()).collect();
    let mut x = Array2::zeros((TOTAL, dims));
    let mut y = Vec::with_capacity(TOTAL);
    for i in 0..TOTAL {
        let c = i % classes;
        for d in 0..dims {
            x[[i, d]] = (centres[c * dims + d] + rng.normal()) as f32;
        }
        y.push(c);
    }
    Dataset::split("blobs", &x, &y, TRAIN, seed)
}

/// Two interleaved spirals in the plane (radius growing with angle over 1.5 turns, Gaussian
/// noise of 0.1 on each coordinate): not linearly separable, needs a hidden layer.
#[must_use]
pub fn spirals(seed: u64) -> Dataset {
    polar_set("spirals", seed, 0x5917, 2, 0.1, |c, rng| {
        let t = rng.uniform();
        let angle = t * 3.0 * std::f64::consts::PI + c as f64 * std::f64::consts::PI;
        (0.2 + 0.8 * t, angle)
    })
}

/// `TOTAL` points in the plane drawn from `seed` (with the set's own `salt`), split as every
/// synthetic set: point `i`, of class `i % classes`, at the polar coordinates `(radius, angle)`
/// that `polar(class, rng)` draws, plus Gaussian noise of standard deviation `noise` on each
/// coordinate.
fn polar_set(
    name: &str,
    seed: u64,
    salt: u64,
    classes: usize,
    noise: f64,
    polar: impl Fn(usize, &mut Rng) -> (f64, f64),
) -> Dataset {
    let mut rng = Rng::derive(seed, salt);
    let mut x = Array2::zeros((TOTAL, 2));
    let mut y = Vec::with_capacity(TOTAL);
    for i in 0..TOTAL {
        let c = i % classes;
        let (r, angle) = polar(c, &mut rng);
        x[[i, 0]] = (r * libm::cos(angle) + noise * rng.normal()) as f32;
        x[[i, 1]] = (r * libm::sin(angle) + noise * rng.normal()) as f32;
        y.push(c);
    }
    Dataset::split(name, &x, &y, TRAIN, seed)
}

/// Tokens of the `recall` sequence task.
pub const RECALL_VOCAB: usize = 8;
/// Length of a `recall` sequence.
pub const RECALL_STEPS: usize = 12;

/// A sequence task: rows of [`RECALL_STEPS`] token ids drawn uniformly from `0..RECALL_VOCAB`,
/// labelled with the first token. A model must carry the first token through the remaining
/// steps of distractors: long-range memory, the job of an LSTM (chance is 1/8).
#[must_use]
pub fn recall(seed: u64) -> Dataset {
    let mut rng = Rng::derive(seed, 0x5E9);
    let x = Array2::from_shape_simple_fn((TOTAL, RECALL_STEPS), || rng.below(RECALL_VOCAB) as f32);
    let y: Vec<usize> = x.column(0).iter().map(|&v| v as usize).collect();
    Dataset::split("recall", &x, &y, TRAIN, seed)
}

/// Modes of the `ring` set.
pub const RING_MODES: usize = 8;
/// Radius of the `ring` set's circle of modes.
pub const RING_RADIUS: f64 = 2.0;
/// Standard deviation of each `ring` mode.
pub const RING_STD: f64 = 0.05;

/// A ring of [`RING_MODES`] Gaussians in the plane (centres on a circle of radius
/// [`RING_RADIUS`], standard deviation [`RING_STD`]), the GAN's target distribution; the label
/// is the mode.
#[must_use]
pub fn ring(seed: u64) -> Dataset {
    polar_set("ring", seed, 0x7196, RING_MODES, RING_STD, |k, _| {
        (
            RING_RADIUS,
            std::f64::consts::TAU * k as f64 / RING_MODES as f64,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_sets_are_seeded_and_balanced() {
        let r = recall(1);
        assert!(
            r.train_x
                .rows()
                .into_iter()
                .zip(&r.train_y)
                .all(|(row, &l)| row[0] as usize == l)
        );
        for make in [blobs as fn(u64) -> Dataset, spirals, ring] {
            let a = make(3);
            let b = make(3);
            let c = make(4);
            assert_eq!(a.train_x, b.train_x);
            assert_ne!(a.train_x, c.train_x);
            assert_eq!(a.train_y.len() + a.test_y.len(), TOTAL);
            let ones = a
                .train_y
                .iter()
                .chain(&a.test_y)
                .filter(|&&l| l == 1)
                .count();
            // Labels cycle through the classes: label 1 is at positions 1, 1 + classes, ...
            assert_eq!(ones, (0..TOTAL).filter(|i| i % a.classes == 1).count());
        }
    }
}
