//! Which autograd nodes of a recorded backward pass the Recorder hooks: [`GraphLook`] looks at
//! the nodes a forward pass creates (their edges, and the dtype each edge's gradient will
//! have) and hooks, with a [`NodeHook`], each node that passes on or sums a narrow gradient.
//! In Rust, so that looking at GPT-2's 138 nodes a step costs no Python per node and edge.

use std::collections::HashMap;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PySet, PyStringMethods, PyTuple, PyType};

use crate::record::{GradAmax, NodeHook};

/// What a node's type says of it: whether it passes on the values it receives, moved (a
/// view, a transpose: `same_values`), whether it casts (`casts`), whether it is a compiled
/// graph's (`CompiledFunctionBackward`).
#[derive(Clone, Copy)]
struct Kind {
    moves: bool,
    cast: bool,
    compiled: bool,
}

/// A hooked node's plan: the node (kept alive, so that its identity holds), the edges whose
/// gradients it passes on that count, and its inputs that receive sums.
struct Plan {
    passed: Py<PyList>,
    sums: Py<PyList>,
}

/// The Recorder's look at the graph of a step (`_BackwardAmax.look`): per edge of each node
/// looked at, how many edges feed the same input of the same node; per node hooked, its plan;
/// the hooks' handles, removed by [`GraphLook::stop`].
#[pyclass(module = "mixprec._mixprec")]
pub struct GraphLook {
    reader: Py<GradAmax>,
    /// The narrow dtypes (torch's dtype objects, compared by identity).
    narrow: Vec<Py<PyAny>>,
    same_values: Vec<String>,
    casts: Vec<String>,
    /// Per node type (by address) seen since the last [`GraphLook::stop`], the type held so
    /// that its address is not reused while it is kept (a Python Function's node type can be
    /// made at run time and freed), and forgotten at each stop (so none is held for long).
    kinds: HashMap<usize, (Py<PyType>, Kind)>,
    /// Per (node, input): how many edges feed it; the nodes are kept alive by `nodes`.
    fed: HashMap<(usize, usize), u32>,
    plans: HashMap<usize, Plan>,
    nodes: Vec<Py<PyAny>>,
    handles: Vec<Py<PyAny>>,
}

impl GraphLook {
    fn kind(&mut self, node: &Bound<'_, PyAny>) -> PyResult<Kind> {
        let ty = node.get_type();
        let key = ty.as_ptr() as usize;
        if let Some((_, k)) = self.kinds.get(&key) {
            return Ok(*k);
        }
        let name = ty.name()?;
        let name = name.to_cow()?;
        let name: &str = &name;
        let kind = Kind {
            moves: self.same_values.iter().any(|n| n == name),
            cast: self.casts.iter().any(|n| n == name),
            compiled: name == "CompiledFunctionBackward",
        };
        self.kinds.insert(key, (ty.clone().unbind(), kind));
        Ok(kind)
    }

    /// The plan of `node`, hooking it the first time: where it passes on an inf or NaN, its
    /// hook calls `callbacks.1` (a cast) or `callbacks.0`.
    fn plan<'py>(
        &mut self,
        node: &Bound<'py, PyAny>,
        cast: bool,
        callbacks: (&Bound<'py, PyAny>, &Bound<'py, PyAny>),
    ) -> PyResult<&Plan> {
        let py = node.py();
        let key = node.as_ptr() as usize;
        if !self.plans.contains_key(&key) {
            let passed = PyList::empty(py).unbind();
            let sums = PyList::empty(py).unbind();
            let callback = if cast { callbacks.1 } else { callbacks.0 };
            let hook = NodeHook::new(
                self.reader.clone_ref(py),
                node.clone().unbind(),
                passed.clone_ref(py),
                sums.clone_ref(py),
                callback.clone().unbind(),
                cast,
            );
            let handle = node.call_method1(intern!(py, "register_hook"), (hook,))?;
            self.handles.push(handle.unbind());
            self.nodes.push(node.clone().unbind());
            self.plans.insert(key, Plan { passed, sums });
        }
        Ok(&self.plans[&key])
    }
}

#[pymethods]
impl GraphLook {
    #[new]
    fn new(
        reader: Py<GradAmax>,
        narrow: Vec<Py<PyAny>>,
        same_values: Vec<String>,
        casts: Vec<String>,
    ) -> Self {
        GraphLook {
            reader,
            narrow,
            same_values,
            casts,
            kinds: HashMap::new(),
            fed: HashMap::new(),
            plans: HashMap::new(),
            nodes: Vec::new(),
            handles: Vec::new(),
        }
    }

    /// Looks at each of `nodes` (each once: the nodes a forward pass created, or a walk's):
    /// counts the edges it feeds, and hooks it, or the nodes it feeds, where a narrow gradient
    /// passes: a node that passes one on along an edge (unless it only moves the values it
    /// received), a node whose input receives the sum of several. The dtype of the gradient
    /// an edge carries is the one the receiving node's input metadata names (the engine casts
    /// to it). Adds each narrow dtype seen to `dtypes`; with `module`, keeps each node's in
    /// `module_of`. A hooked node that passes on an inf or NaN calls `nonfinite(node,
    /// grad_outputs, passed)` (a cast: `cast_nonfinite`). Returns whether a node of a compiled
    /// graph was seen.
    fn look(
        &mut self,
        nodes: &Bound<'_, PyAny>,
        module: Option<&Bound<'_, PyAny>>,
        module_of: &Bound<'_, PyDict>,
        dtypes: &Bound<'_, PySet>,
        nonfinite: &Bound<'_, PyAny>,
        cast_nonfinite: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let callbacks = (nonfinite, cast_nonfinite);
        let py = nodes.py();
        let mut compiled = false;
        for node in nodes.try_iter()? {
            let node = node?;
            if let Some(m) = module {
                module_of.set_item(&node, m)?;
            }
            let kind = self.kind(&node)?;
            compiled |= kind.compiled;
            let edges = node.getattr(intern!(py, "next_functions"))?;
            let edges = edges.cast::<PyTuple>()?;
            for (i, edge) in edges.iter().enumerate() {
                let f = edge.get_item(0)?;
                if f.is_none() {
                    continue;
                }
                let k: usize = edge.get_item(1)?.extract()?;
                let n = self.fed.entry((f.as_ptr() as usize, k)).or_insert(0);
                *n += 1;
                let n = *n;
                if n == 1 {
                    self.nodes.push(f.clone().unbind());
                }
                let meta = f.getattr(intern!(py, "_input_metadata"))?;
                if k >= meta.len()? {
                    continue;
                }
                let dtype = meta.get_item(k)?.getattr(intern!(py, "dtype"))?;
                if !self.narrow.iter().any(|d| dtype.is(d)) {
                    continue;
                }
                dtypes.add(&dtype)?;
                if n == 2 {
                    // f's input k receives a sum.
                    let cast = self.kind(&f)?.cast;
                    self.plan(&f, cast, callbacks)?.sums.bind(py).append(k)?;
                }
                if !kind.moves {
                    self.plan(&node, kind.cast, callbacks)?
                        .passed
                        .bind(py)
                        .append(i)?;
                }
            }
        }
        Ok(compiled)
    }

    /// How many nodes are hooked.
    #[getter]
    fn hooked(&self) -> usize {
        self.plans.len()
    }

    /// Removes every hook, and forgets the graph.
    fn stop(&mut self, py: Python<'_>) -> PyResult<()> {
        for h in std::mem::take(&mut self.handles) {
            h.bind(py).call_method0(intern!(py, "remove"))?;
        }
        self.fed.clear();
        self.plans.clear();
        self.kinds.clear();
        self.nodes.clear();
        Ok(())
    }
}
