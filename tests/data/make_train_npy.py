"""Makes the small training-data fixtures under tests/data/ with numpy, as a user would: the same
60 examples (3 Gaussian blobs in 4 dimensions) written two ways.

- train_x.npy: the features, float32 in Fortran (column-major) order; train_y.npy: the labels,
  int8 (any integer dtype numpy writes is read).
- train_xy.npy: features and labels in one float64 C-order array, the label in the last column.

Read back, both give the same data set, so training on either gives the same metrics (a test in
tests/train_cli.rs). Run from the repository root with numpy installed (not a dependency of the
crate):
    python3 tests/data/make_train_npy.py
"""

import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    rng = np.random.default_rng(7)
    centres = np.array([[2.0, 0.0, 0.0, 1.0], [-2.0, 1.0, 0.0, -1.0], [0.0, -2.0, 2.0, 0.0]])
    y = np.repeat(np.arange(3), 20)
    x = (centres[y] + 0.5 * rng.standard_normal((60, 4))).astype(np.float32)
    order = rng.permutation(60)
    x, y = x[order], y[order]
    np.save(os.path.join(HERE, "train_x.npy"), np.asfortranarray(x))
    np.save(os.path.join(HERE, "train_y.npy"), y.astype(np.int8))
    xy = np.hstack([x.astype(np.float64), y[:, None].astype(np.float64)])
    np.save(os.path.join(HERE, "train_xy.npy"), xy)


if __name__ == "__main__":
    main()
