//! The vocabulary every writer and reader of runs shares: the classes of tensors a recipe gives a
//! format to, the storage points (sites) that store them, and what a step's stores of one class
//! held.

use serde::{Deserialize, Serialize};

/// The classes of tensors a recipe gives a format to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// The weights the forward and backward passes read.
    Weight,
    /// Layer outputs and the network's input.
    Activation,
    /// Gradients of the loss with respect to activations.
    ActivationGrad,
    /// Gradients of the loss with respect to weights and biases.
    WeightGrad,
    /// Optimizer state (momentum, Adam's moments, Adam's epsilon and denominator).
    OptimizerState,
    /// The update added to the master weights: observed on capture steps, never rounded (it is
    /// added in one fused operation, as PyTorch's `add_` and `addcdiv_` do).
    Update,
    /// The master weights after the update.
    Master,
    /// A matrix product's input operand (a layer's input activation), cast just before the
    /// product: Transformer Engine's `GEMM1_INPUT`.
    GemmInput,
    /// A matrix product's weight operand, cast just before the product: TE's `GEMM1_WEIGHT`.
    GemmWeight,
    /// The output gradient as an operand of the backward products (input and weight
    /// gradients), cast just before them: TE's `GRAD_OUTPUT1`.
    GemmGradOutput,
}

impl Class {
    /// Every class, in the order of [`Class::index`].
    pub const ALL: [Class; 10] = [
        Class::Weight,
        Class::Activation,
        Class::ActivationGrad,
        Class::WeightGrad,
        Class::OptimizerState,
        Class::Update,
        Class::Master,
        Class::GemmInput,
        Class::GemmWeight,
        Class::GemmGradOutput,
    ];

    /// The classes a recipe stores in a format of its own (its fields `weights` to
    /// `master_weights`), in the order of [`Class::ALL`]: every class but the update, never
    /// stored, and the GEMM operands, cast from stored tensors.
    pub const STORED: [Class; 6] = [
        Class::Weight,
        Class::Activation,
        Class::ActivationGrad,
        Class::WeightGrad,
        Class::OptimizerState,
        Class::Master,
    ];

    /// Position in [`Class::ALL`].
    #[must_use]
    pub fn index(self) -> usize {
        self as usize
    }

    /// The snake-case name used in files.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Class::Weight => "weight",
            Class::Activation => "activation",
            Class::ActivationGrad => "activation_grad",
            Class::WeightGrad => "weight_grad",
            Class::OptimizerState => "optimizer_state",
            Class::Update => "update",
            Class::Master => "master",
            Class::GemmInput => "gemm_input",
            Class::GemmWeight => "gemm_weight",
            Class::GemmGradOutput => "gemm_grad_output",
        }
    }

    /// Whether the class is a matrix product's operand, cast just before the product (its
    /// format is a field of the recipe's `gemm_operands`).
    #[must_use]
    pub fn is_operand(self) -> bool {
        matches!(
            self,
            Class::GemmInput | Class::GemmWeight | Class::GemmGradOutput
        )
    }

    /// Whether the class's values are computed from the batch: the activations, their
    /// gradients and the operands cast from them. Under data parallelism each rank holds its
    /// own batch's, and merging the ranks' captures takes the union; the other classes belong
    /// to the parameters, which DDP's ranks hold in identical copies (counted once) and FSDP's
    /// in disjoint shards.
    #[must_use]
    pub fn from_batch(self) -> bool {
        matches!(
            self,
            Class::Activation | Class::ActivationGrad | Class::GemmInput | Class::GemmGradOutput
        )
    }

    /// The key of the recipe's JSON that holds the class's format (the field
    /// [`Recipe::format`](super::Recipe::format) reads): a field of the recipe itself, or for an
    /// operand ([`Class::is_operand`]) a field of its `gemm_operands`; `None` for the update,
    /// which has no format (it is never rounded).
    #[must_use]
    pub fn recipe_key(self) -> Option<&'static str> {
        Some(match self {
            Class::Weight => "weights",
            Class::Activation => "activations",
            Class::ActivationGrad => "activation_grads",
            Class::WeightGrad => "weight_grads",
            Class::OptimizerState => "optimizer_state",
            Class::Update => return None,
            Class::Master => "master_weights",
            Class::GemmInput => "input",
            Class::GemmWeight => "weight",
            Class::GemmGradOutput => "grad_output",
        })
    }
}

/// The parts of [`Class::OptimizerState`] the training core's optimizers store, each after
/// the kind of optimizer that stores it (`sgd` with momentum, `adam`): the `part` of the run
/// directory's sites, and what `Precision::set_part` is given.
pub const OPTIMIZER_PARTS: [(&str, &str); 5] = [
    ("sgd", "momentum"),
    ("adam", "adam_m"),
    ("adam", "adam_v"),
    ("adam", "adam_eps"),
    ("adam", "adam_denominator"),
];

/// A storage point: a layer (by name) and a tensor class.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Site {
    /// The layer's name, e.g. `"2.linear"`, or `"input"`, `"loss"`, `"optimizer"`.
    pub layer: String,
    /// The tensor class.
    pub tensor: Class,
    /// The operation that formed the value, where the writer knows it (the PyTorch recorder:
    /// the module's type in the forward pass, e.g. `Linear`, the autograd node's in the
    /// backward, e.g. `MmBackward0`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub op: Option<String>,
}

/// What the stores of one tensor class held in one step, and what rounding did to them (the
/// per-step accounting of `metrics.jsonl`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreCounts {
    /// Values stored.
    pub stored: u64,
    /// Nonzero finite values that became zero.
    pub underflow: u64,
    /// Nonzero results below the smallest normal.
    pub subnormal: u64,
    /// Finite values whose rounded magnitude exceeded the format's largest value.
    pub overflow: u64,
    /// Values that were inf or NaN before rounding.
    pub nonfinite: u64,
}

/// A storage point: a layer (its site's index), a tensor class and a part of the class (`""`
/// for the class as a whole; see [`crate::train::Precision::set_part`]). Ordered by layer, then
/// class, then part: the order in which captures and counts are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SiteKey {
    /// The site's index ([`crate::train::Precision::register`]).
    pub layer: usize,
    /// The tensor class stored there.
    pub class: Class,
    /// The part of the class (an optimizer state's `momentum`, ...), `""` for the whole.
    pub part: &'static str,
}

impl SiteKey {
    /// The storage point of `class`'s `part` at site `layer`.
    #[must_use]
    pub const fn new(layer: usize, class: Class, part: &'static str) -> SiteKey {
        SiteKey { layer, class, part }
    }
}
