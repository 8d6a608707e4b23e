"""compile.nnet_memo: what the compiler derives from a network's structure is
reused between compilations only while the structure is unchanged."""
from __future__ import annotations

import gc

from pynnet3.compile import nnet_memo as memo_module
from pynnet3.compile.compiler import Compiler
from pynnet3.compile.nnet_memo import nnet_memo
from pynnet3.compile.request_io import build_request
from pynnet3.nnet.components.base import new_component_of_type
from tests.helpers import nnet_from_config
from tests.helpers_graph import TDNN


def test_reused_while_the_structure_is_unchanged():
    nnet = nnet_from_config(TDNN)
    made = []
    first = nnet_memo(nnet, "k", lambda n: made.append(1) or object())
    assert nnet_memo(nnet, "k", lambda n: made.append(1) or object()) is first
    assert len(made) == 1
    # Another key, another value; another network, its own entry.
    assert nnet_memo(nnet, "other", lambda n: 5) == 5
    other = nnet_from_config(TDNN)
    assert nnet_memo(other, "k", lambda n: "new") == "new"


def test_structural_changes_are_noticed():
    nnet = nnet_from_config(TDNN)
    assert nnet_memo(nnet, "k", lambda n: 1) == 1
    # A node added by reading more config.
    nnet.read_config("output-node name=output2 input=r1\n", "<test>")
    assert nnet_memo(nnet, "k", lambda n: 2) == 2
    # A component object replaced.
    old = nnet.components[1]
    nnet.components[1] = new_component_of_type(type(old).__name__)
    assert nnet_memo(nnet, "k", lambda n: 3) == 3
    # A node's field edited in place.
    nnet.nodes[-1].component_index = nnet.nodes[-1].component_index
    assert nnet_memo(nnet, "k", lambda n: 4) == 3
    nnet.nodes[0].dim += 1
    assert nnet_memo(nnet, "k", lambda n: 5) == 5


def test_entries_go_with_the_network():
    nnet = nnet_from_config(TDNN)
    nnet_memo(nnet, "k", lambda n: 1)
    ident = id(nnet)
    assert ident in memo_module._MEMO
    del nnet
    gc.collect()
    assert ident not in memo_module._MEMO


def test_compiling_twice_and_after_a_change_gives_fresh_computations():
    """The second compilation (memo used) prints as the first; after the
    network grows, the computation is that of the grown network."""
    nnet = nnet_from_config(TDNN)
    names = lambda n: (n.component_names, n.node_names)  # noqa: E731
    request = build_request(nnet, 2, 5)
    a = Compiler(request, nnet).create_computation().print(*names(nnet))
    b = Compiler(request, nnet).create_computation().print(*names(nnet))
    assert a == b
    nnet.read_config("output-node name=output input=Scale(2.0, a2)\n", "<test>")
    grown = Compiler(request, nnet).create_computation().print(*names(nnet))
    fresh_nnet = nnet_from_config(TDNN)      # (no entry yet: everything made afresh)
    fresh_nnet.read_config("output-node name=output input=Scale(2.0, a2)\n", "<test>")
    fresh = Compiler(request, fresh_nnet).create_computation().print(*names(fresh_nnet))
    assert grown == fresh != a


def test_checked_once_per_compilation_block_and_again_in_the_next():
    """Inside one component_properties_cached block (one compilation) the
    structure is compared once; a change made between blocks is noticed."""
    from pynnet3.nnet.properties_cache import component_properties_cached

    nnet = nnet_from_config(TDNN)
    calls = []
    real = memo_module._structure
    memo_module._structure = lambda n: calls.append(1) or real(n)
    try:
        with component_properties_cached():
            assert nnet_memo(nnet, "k", lambda n: 1) == 1
            assert nnet_memo(nnet, "k", lambda n: 2) == 1
            assert nnet_memo(nnet, "other", lambda n: 3) == 3
        assert len(calls) == 1
        nnet.read_config("output-node name=output2 input=r1\n", "<test>")
        with component_properties_cached():
            assert nnet_memo(nnet, "k", lambda n: 4) == 4
            assert nnet_memo(nnet, "k", lambda n: 5) == 4
        assert len(calls) == 2
        # Another network in the same block has its own entry.
        other = nnet_from_config(TDNN)
        with component_properties_cached():
            assert nnet_memo(nnet, "k", lambda n: 6) == 4
            assert nnet_memo(other, "k", lambda n: 7) == 7
    finally:
        memo_module._structure = real
