//! The pipeline on small in-memory tensors, against hand-worked numbers.
