//! Token embedding.

use ndarray::Array2;

use super::{Layer, Param, init_uniform};
use crate::recipe::Class;
use crate::train::precision::Precision;
use crate::train::real::Real;
use crate::train::rng::Rng;

/// Maps each of a row's `T` token ids (stored as numbers, rounded to the nearest integer) to a
/// row of a `vocab × dim` table; the output row is the `T` embeddings side by side (`T·dim`).
/// An id outside `0..vocab` gives a zero vector and no gradient.
/// ```text
/// y[n, t·dim + k] = E[id[n, t], k]          dL/dE[v, k] = Σ_{(n, t): id = v} dy[n, t·dim + k]
/// ```
/// Ids are discrete, so the input gradient is zero.
#[derive(Clone, Debug)]
pub struct Embedding<T> {
    /// The table, (vocab, dim).
    pub table: Param<T>,
    ids: Option<Array2<Option<usize>>>,
}

impl<T: Real> Embedding<T> {
    /// A table of `vocab` rows of `dim` values, uniform in `[-init_scale, init_scale]`, owned by
    /// site `site`.
    #[must_use]
    pub fn new(vocab: usize, dim: usize, init_scale: f64, site: usize, rng: &mut Rng) -> Self {
        Embedding {
            table: Param::new(
                "weight",
                site,
                init_uniform((vocab, dim), 1, init_scale, rng),
            ),
            ids: None,
        }
    }
}

impl<T: Real> Layer<T> for Embedding<T> {
    fn kind(&self) -> &'static str {
        "embedding"
    }

    fn forward(&mut self, x: Array2<T>, p: &mut Precision) -> Array2<T> {
        let (vocab, dim) = self.table.weight.dim();
        let ids = x.mapv(|v| {
            let r = v.round().to_f64();
            (r >= 0.0 && r < vocab as f64).then_some(r as usize)
        });
        let mut y = Array2::zeros((x.nrows(), x.ncols() * dim));
        for ((n, t), id) in ids.indexed_iter() {
            if let Some(id) = *id {
                for k in 0..dim {
                    y[[n, t * dim + k]] = self.table.weight[[id, k]];
                }
            }
        }
        p.store_array(Class::Activation, &mut y);
        self.ids = Some(ids);
        y
    }

    fn backward(&mut self, dy: Array2<T>, p: &mut Precision) -> Array2<T> {
        let dim = self.table.weight.ncols();
        let mut grad = Array2::zeros(self.table.weight.dim());
        let cols = dy.ncols() / dim.max(1);
        if let Some(ids) = &self.ids {
            for ((n, t), id) in ids.indexed_iter() {
                if let Some(id) = *id {
                    for k in 0..dim {
                        grad[[id, k]] += dy[[n, t * dim + k]];
                    }
                }
            }
        }
        self.table.set_grad(grad, p);
        Array2::zeros((dy.nrows(), cols))
    }

    fn params(&self) -> Vec<&Param<T>> {
        vec![&self.table]
    }

    fn params_mut(&mut self) -> Vec<&mut Param<T>> {
        vec![&mut self.table]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::layer::check::check_layer;

    #[test]
    fn gradient_check_and_lookup() {
        let mut rng = Rng::new(31);
        let mut layer = Embedding::<f64>::new(5, 3, 1.0, 0, &mut rng);
        // Repeated ids (gradients add), and one id out of range.
        let x = ndarray::arr2(&[[0.0, 4.0, 4.0], [2.0, 9.0, 1.0]]);
        check_layer(&mut layer, &x, 32);
        let mut p = Precision::exact();
        p.register("e");
        let y = layer.forward(x, &mut p);
        assert_eq!(
            y.row(0).to_vec()[3..6],
            layer.table.weight.row(4).to_vec()[..]
        );
        assert!(y.row(1).to_vec()[3..6].iter().all(|&v| v == 0.0));
    }
}
