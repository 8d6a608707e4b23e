"""Kaldi's ComputationChecker::CheckComputationIndexes: every index a
command holds points at something that exists and fits.

Every command's arguments are checked against the ranges of the tables they
index (submatrices, indexes, indexes_multi, indexes_ranges, precomputed
indexes, components, nodes) and against each other's dimensions, so that
the analysis and the executor never index out of range.  Large index tables
are checked with array operations.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .. import fast_paths
from ..compile.computation import (COMMAND_SPECS, Command, CommandType, CompressedMatrixType,
                                   IndexTable, NnetComputation)
from ..errors import ComputationCheckError
from ..nnet.components.base import Prop
from ..nnet.properties_cache import component_properties, nnet_component_properties
from .arrays import type_mask, unique_ints
from .check_common import command_error, properties_array, validate_submatrices

T = CommandType
# Component property bits as plain ints (IntFlag arithmetic is slow in loops).
_P_BACKPROP_IN_PLACE = int(Prop.BACKPROP_IN_PLACE)
_P_BACKPROP_NEEDS_INPUT = int(Prop.BACKPROP_NEEDS_INPUT)
_P_BACKPROP_NEEDS_OUTPUT = int(Prop.BACKPROP_NEEDS_OUTPUT)
_P_PROPAGATE_IN_PLACE = int(Prop.PROPAGATE_IN_PLACE)
_P_SIMPLE = int(Prop.SIMPLE)
_P_UPDATABLE = int(Prop.UPDATABLE)
_P_USES_MEMO = int(Prop.USES_MEMO)
_T_PROPAGATE = int(T.PROPAGATE)

# Command-type masks for the array checks (see arrays.type_mask).
_MASK_ANY = type_mask(T)
_MASK_WHOLE_ARG1 = type_mask([T.ALLOC_MATRIX, T.DEALLOC_MATRIX, T.DECOMPRESS_MATRIX])
_MASK_SET_CONST = type_mask([T.SET_CONST])
_MASK_SWAP = type_mask([T.SWAP_MATRIX])
_MASK_COPY_ADD = type_mask([T.MATRIX_COPY, T.MATRIX_ADD])
_MASK_BACKPROP = type_mask([T.BACKPROP, T.BACKPROP_NO_MODEL_UPDATE])
_MASK_IO = type_mask([T.ACCEPT_INPUT, T.PROVIDE_OUTPUT])
# By the index table a command uses (its command spec).
_MASK_ROWS = type_mask([t for t, s in COMMAND_SPECS.items()
                        if s.index_table is IndexTable.INDEXES])
_MASK_OTHER = type_mask([t for t, s in COMMAND_SPECS.items()
                         if s.index_table in (IndexTable.INDEXES_MULTI, IndexTable.INDEXES_RANGES)]
                        + [T.COMPRESS_MATRIX, T.GOTO_LABEL])


# The last network's component dimensions, with the properties list the
# component property cache gave for it: within one compilation (one cache)
# that list is the same object for the same network, so the dimensions are
# asked once.  (Holding the list keeps its identity from being reused.)
_last_dims: tuple[Any, np.ndarray, np.ndarray] = (None, np.zeros(0), np.zeros(0))


def _component_dims(nnet: Any) -> tuple[np.ndarray, np.ndarray]:
    """Input and output dimensions of every component (int64 arrays)."""
    global _last_dims
    props = nnet_component_properties(nnet)
    last = _last_dims
    if last[0] is props:
        return last[1], last[2]
    components = [nnet.get_component(i) for i in range(nnet.num_components())]
    in_dim = np.array([c.input_dim() for c in components], dtype=np.int64)
    out_dim = np.array([c.output_dim() for c in components], dtype=np.int64)
    _last_dims = (props, in_dim, out_dim)
    return in_dim, out_dim


def _index_stats(indexes: np.ndarray) -> tuple[int, int, int]:
    """(length, max, min) of an index table (0, 0, 0 if empty)."""
    if len(indexes) == 0:
        return 0, 0, 0
    return len(indexes), int(indexes.max()), int(indexes.min())


class IndexChecker:
    """Kaldi's ComputationChecker::CheckComputationIndexes on one computation."""

    def __init__(self, nnet: Any, computation: NnetComputation) -> None:
        self.nnet = nnet
        self.computation = comp = computation
        subs = comp.submatrices
        self.num_submatrices = len(subs)
        self.num_components = self.nnet.num_components() if self.nnet is not None else 0
        self.memo_to_command: dict[int, int] = {}
        self._props: dict[int, int] = {}
        if len(subs) < fast_paths.current().analysis_python_below and self._init_small(comp):
            return
        table = comp.submatrix_table()
        sizes = np.array([(m.num_rows, m.num_cols) for m in comp.matrices],
                         dtype=np.int64).reshape(-1, 2)
        if len(table) == 0 or tuple(table[0]) != (0, 0, 0, 0, 0):
            raise ComputationCheckError("submatrix 0 must be the empty submatrix")
        validate_submatrices(*(table[1:, i] for i in range(5)), sizes)
        # Arrays for the table checks, lists for the per-command ones (NumPy
        # scalar indexing is slow).
        self.sub_rows_array = table[:, 2]
        self.sub_cols_array = table[:, 4]
        whole = np.zeros(len(table), dtype=bool)
        m = table[1:, 0]
        whole[1:] = ((table[1:, 1] == 0) & (table[1:, 3] == 0)
                     & (table[1:, 2] == sizes[m, 0]) & (table[1:, 4] == sizes[m, 1]))
        self.sub_rows: list[int] = self.sub_rows_array.tolist()
        self.sub_cols: list[int] = self.sub_cols_array.tolist()
        self.whole: list[bool] = whole.tolist()
        self.whole_array = whole

    def _init_small(self, comp: NnetComputation) -> bool:
        """The submatrix facts of ``__init__`` by a loop over the records
        (few of them); False, having set nothing, if some submatrix is out
        of range (the array version then says which)."""
        subs, matrices = comp.submatrices, comp.matrices
        first = subs[0]
        if (first.matrix_index, first.row_offset, first.num_rows, first.col_offset,
                first.num_cols) != (0, 0, 0, 0, 0):
            return False
        num_matrices = len(matrices)
        rows, cols, whole = [0], [0], [False]
        for sub in subs[1:]:
            m, r0, nr, c0, nc = (sub.matrix_index, sub.row_offset, sub.num_rows,
                                 sub.col_offset, sub.num_cols)
            if not 1 <= m < num_matrices:
                return False
            matrix = matrices[m]
            mr, mc = matrix.num_rows, matrix.num_cols
            if r0 < 0 or nr <= 0 or r0 + nr > mr or c0 < 0 or nc <= 0 or c0 + nc > mc:
                return False
            rows.append(nr)
            cols.append(nc)
            whole.append(r0 == 0 and c0 == 0 and nr == mr and nc == mc)
        self.sub_rows, self.sub_cols, self.whole = rows, cols, whole
        self.sub_rows_array = np.array(rows, dtype=np.int64)
        self.sub_cols_array = np.array(cols, dtype=np.int64)
        self.whole_array = np.array(whole, dtype=bool)
        return True

    def error(self, c: int, message: str) -> ComputationCheckError:
        return command_error(self.computation, self.nnet, c, message)

    # -- small predicates ----------------------------------------------------
    def sub_ok(self, s: int, allow_zero: bool = False) -> bool:
        return (0 if allow_zero else 1) <= s < self.num_submatrices

    def whole_ok(self, s: int) -> bool:
        return 1 <= s < self.num_submatrices and self.whole[s]

    def component(self, c: int, index: int):
        if self.nnet is None or not 0 <= index < self.num_components:
            raise self.error(c, f"component index {index} out of range")
        return self.nnet.get_component(index)

    def properties(self, index: int, comp) -> int:
        """The component's property flags, asked once per component."""
        p = self._props.get(index)
        if p is None:
            p = self._props[index] = component_properties(comp)
        return p

    # -- all commands at once ----------------------------------------------------
    def run(self) -> None:
        """Check every command; the command-by-command loop runs (and names
        the first bad command) only where the array checks find something,
        or for a short computation, where it is quicker than they are."""
        if len(self.computation.commands) < fast_paths.current().check_indexes_loop_below or not self._all_ok():
            self.run_loop()

    def _all_ok(self) -> bool:
        """True if no command would fail :meth:`run_loop` (array checks over
        the command table, per command type).  May return False for a
        computation the loop accepts; never True for one it rejects."""
        comp = self.computation
        commands = comp.commands
        table = comp.command_table()
        n = len(table)
        if n == 0:
            return True
        types = table[:, 0]
        num_subs = self.num_submatrices
        rows, cols = self.sub_rows_array, self.sub_cols_array
        whole = self.whole_array

        def sub_ok(a: np.ndarray, allow_zero: bool = False) -> np.ndarray:
            return (a >= (0 if allow_zero else 1)) & (a < num_subs)

        def at(values: np.ndarray, a: np.ndarray) -> np.ndarray:
            return values[np.clip(a, 0, num_subs - 1)]

        def whole_ok(a: np.ndarray) -> np.ndarray:
            return sub_ok(a) & at(whole, a)

        def of(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            sel = np.flatnonzero(mask[types])
            return sel, table[sel].T

        if len(types) and (types.min() < 0 or types.max() >= len(_MASK_ANY)):
            return False
        # Whole-matrix commands.
        sel, a = of(_MASK_WHOLE_ARG1)
        if len(sel) and not whole_ok(a[1]).all():
            return False
        sel, a = of(_MASK_SET_CONST)
        if len(sel) and not sub_ok(a[1]).all():
            return False
        sel, a = of(_MASK_SWAP)
        if len(sel) and not (whole_ok(a[1]) & whole_ok(a[2]) & (at(rows, a[1]) == at(rows, a[2]))
                             & (at(cols, a[1]) == at(cols, a[2]))).all():
            return False
        # Copies and additions of whole submatrices.
        sel, a = of(_MASK_COPY_ADD)
        if len(sel):
            a1, a2 = a[1], a[2]
            if not (sub_ok(a1) & sub_ok(a2) & (at(rows, a1) == at(rows, a2))
                    & (at(cols, a1) == at(cols, a2))).all():
                return False
            for c in sel[a1 == a2].tolist():
                command = commands[c]
                if not (command.command_type is T.MATRIX_COPY and command.alpha != 1.0):
                    return False
        if not self._components_ok(table, types, sub_ok, at):
            return False
        # Row copies through an index table.
        sel, a = of(_MASK_ROWS)
        if len(sel):
            a1, a2, k = a[1], a[2], a[3]
            indexes = comp.indexes
            if not (sub_ok(a1) & sub_ok(a2) & (k >= 0) & (k < len(indexes))
                    & (at(cols, a1) == at(cols, a2)) & (a1 != a2)).all():
                return False
            uk = unique_ints(k)
            stats = np.array([_index_stats(indexes[i]) for i in uk.tolist()],
                             dtype=np.int64).reshape(-1, 3)[np.searchsorted(uk, k)]
            length, high, low = stats[:, 0], stats[:, 1], stats[:, 2]
            if not ((length == at(rows, a1))
                    & ((length == 0) | ((high < at(rows, a2)) & (low >= -1)))).all():
                return False
        # Input and output.
        sel, a = of(_MASK_IO)
        if len(sel):
            if not whole_ok(a[1]).all() or self.nnet is None:
                return False
            nnet = self.nnet
            num_nodes = nnet.num_nodes()
            for node in set(a[2].tolist()):
                if not (0 <= node < num_nodes
                        and (nnet.is_input_node(node) or nnet.is_output_node(node))):
                    return False
        # The rarer commands: as the loop checks them.
        sel, _ = of(_MASK_OTHER)
        for c in sel.tolist():
            command = commands[c]
            t = command.command_type
            if t is T.COMPRESS_MATRIX or t is T.GOTO_LABEL:
                if not self._rare_ok(c, command):
                    return False
                continue
            try:
                _INDEX_CHECKS[COMMAND_SPECS[t].index_table](self, c, command)
            except Exception:  # the loop says what (or finds an earlier problem)
                return False
        return True

    def _rare_ok(self, c: int, command: Command) -> bool:
        commands = self.computation.commands
        if command.command_type is T.GOTO_LABEL:
            label = command.arg1
            return (0 <= label < c and commands[label].command_type is T.NO_OPERATION_LABEL
                    and c + 1 == len(commands))
        return (self.whole_ok(command.arg1)
                and CompressedMatrixType.INT8 <= command.arg2 <= CompressedMatrixType.UINT16
                and command.arg3 in (0, 1) and 0.0 <= command.alpha <= 1000.0
                and not (command.alpha == 0.0 and command.arg2 != CompressedMatrixType.UINT8))

    def _components_ok(self, table: np.ndarray, types: np.ndarray, sub_ok: Any,
                       at: Any) -> bool:
        """The Propagate and Backprop checks of the loop, including memos."""
        prop = np.flatnonzero(types == _T_PROPAGATE)
        back = np.flatnonzero(_MASK_BACKPROP[types])
        if len(prop) == 0 and len(back) == 0:
            return True
        if self.nnet is None:
            return False
        ci_all = np.concatenate([table[prop, 1], table[back, 1]])
        if ci_all.min() < 0 or ci_all.max() >= self.num_components:
            return False
        props_all = properties_array(self.nnet)
        in_dim, out_dim = _component_dims(self.nnet)
        num_precomputed = len(self.computation.component_precomputed_indexes)
        rows, cols = self.sub_rows_array, self.sub_cols_array
        if len(prop):
            a = table[prop].T
            ci = a[1]
            props = props_all[ci]
            simple = (props & _P_SIMPLE) != 0
            a2, a3, a4, a6 = a[2], a[3], a[4], a[6]
            ok = ((a2 >= 0) & (a2 < num_precomputed) & ~((a2 != 0) & simple)
                  & sub_ok(a3, True) & ((a3 != 0) | ~simple) & sub_ok(a4)
                  & ((a3 <= 0) | (at(cols, a3) == in_dim[ci]))
                  & (at(cols, a4) == out_dim[ci])
                  & ~(simple & (at(rows, a3) != at(rows, a4)))
                  & ~((a3 == a4) & ((props & _P_PROPAGATE_IN_PLACE) == 0))
                  & ((a6 == -1) | (a6 == 0) | (a6 == 1)))
            if not ok.all():
                return False
        if len(back):
            a = table[back].T
            ci = a[1]
            props = props_all[ci]
            simple = (props & _P_SIMPLE) != 0
            a2, a3, a4, a5, a6, a7 = a[2], a[3], a[4], a[5], a[6], a[7]
            ok = ((a2 >= 0) & (a2 < num_precomputed) & ~((a2 != 0) & simple)
                  & sub_ok(a3, True) & sub_ok(a4, True) & sub_ok(a5) & sub_ok(a6, True)
                  & ~(((props & _P_BACKPROP_NEEDS_INPUT) != 0) & (a3 == 0))
                  & ~(((props & _P_BACKPROP_NEEDS_OUTPUT) != 0) & (a4 == 0))
                  & ~((a6 == 0) & ((props & _P_UPDATABLE) == 0))
                  & ~((a5 == a6) & ((props & _P_BACKPROP_IN_PLACE) == 0))
                  & ((a3 == 0) | (at(cols, a3) == in_dim[ci]))
                  & ((a4 == 0) | (at(cols, a4) == out_dim[ci]))
                  & ((a5 == 0) | (at(cols, a5) == out_dim[ci]))
                  & ((a6 == 0) | (at(cols, a6) == in_dim[ci]))
                  & ~((a3 != 0) & (a6 != 0) & (at(rows, a3) != at(rows, a6)))
                  & ~((a4 != 0) & (at(rows, a4) != at(rows, a5)))
                  & ~(simple & (a6 != 0) & (at(rows, a5) != at(rows, a6)))
                  & (a7 >= -1)
                  & ((a7 <= 0) | ((props & _P_USES_MEMO) != 0)))
            if not ok.all():
                return False
        # Memos: each produced once, consumed once, by the same component.
        produce = prop[table[prop, 5] > 0]
        consume = back[table[back, 7] > 0]
        if len(produce) or len(consume):
            events = np.concatenate([produce, consume])
            events.sort()
            pending: dict[int, int] = {}
            for c, t, comp_index, a5, a7 in zip(events.tolist(), table[events, 0].tolist(),
                                                table[events, 1].tolist(),
                                                table[events, 5].tolist(),
                                                table[events, 7].tolist()):
                if t == _T_PROPAGATE:
                    if a5 in pending:
                        return False
                    pending[a5] = comp_index
                else:
                    if pending.pop(a7, None) != comp_index:
                        return False
            if pending:
                return False
        return True

    # -- per command ---------------------------------------------------------
    def run_loop(self) -> None:
        """Every command in turn: the whole-matrix arguments and the index
        table its spec names, then the checks particular to its type."""
        commands = self.computation.commands
        for c, command in enumerate(commands):
            t = command.command_type
            spec = COMMAND_SPECS[t]
            if spec.whole_args:
                args = command.args
                if not all(self.whole_ok(args[pos - 1]) for pos in spec.whole_args):
                    raise self.error(c, "submatrix index out of range or not a whole matrix")
            if spec.index_table is not IndexTable.NONE:
                _INDEX_CHECKS[spec.index_table](self, c, command)
            check = _TYPE_CHECKS.get(t)
            if check is not None:
                check(self, c, command)
        if self.memo_to_command:
            memo, c = next(iter(self.memo_to_command.items()))
            raise self.error(c, f"memo {memo} is produced here but never consumed by a backprop")

    def check_set_const(self, c: int, command: Command) -> None:
        if not self.sub_ok(command.arg1):
            raise self.error(c, "submatrix index out of range")

    def check_swap(self, c: int, command: Command) -> None:
        if (self.sub_rows[command.arg1] != self.sub_rows[command.arg2]
                or self.sub_cols[command.arg1] != self.sub_cols[command.arg2]):
            raise self.error(c, "dimension mismatch in SwapMatrix")

    def check_copy_add(self, c: int, command: Command) -> None:
        t = command.command_type
        a1, a2 = command.arg1, command.arg2
        if not (self.sub_ok(a1) and self.sub_ok(a2)):
            raise self.error(c, "submatrix index out of range in matrix copy/add")
        if (self.sub_rows[a1] != self.sub_rows[a2]
                or self.sub_cols[a1] != self.sub_cols[a2]):
            raise self.error(c, "dimension mismatch in matrix copy/add")
        # Copying a matrix onto itself with alpha != 1 is how scaling is done.
        if a1 == a2 and not (t is T.MATRIX_COPY and command.alpha != 1.0):
            raise self.error(c, "adding/copying a submatrix to itself")

    def check_compress(self, c: int, command: Command) -> None:
        if not CompressedMatrixType.INT8 <= command.arg2 <= CompressedMatrixType.UINT16:
            raise self.error(c, "invalid compressed-matrix type")
        if command.arg3 not in (0, 1):
            raise self.error(c, "invalid 'truncate' option for compressing a matrix")
        if (not 0.0 <= command.alpha <= 1000.0
                or (command.alpha == 0.0 and command.arg2 != CompressedMatrixType.UINT8)):
            raise self.error(c, "invalid alpha in CompressMatrix")

    def check_io(self, c: int, command: Command) -> None:
        n = command.arg2
        if (self.nnet is None or not 0 <= n < self.nnet.num_nodes()
                or not (self.nnet.is_input_node(n) or self.nnet.is_output_node(n))):
            raise self.error(c, f"invalid network node {n} (not an input or output node)")

    def check_goto(self, c: int, command: Command) -> None:
        commands = self.computation.commands
        label = command.arg1
        if (not 0 <= label < c
                or commands[label].command_type is not T.NO_OPERATION_LABEL):
            raise self.error(c, "GotoLabel has an invalid destination")
        if c + 1 != len(commands):
            raise self.error(c, "GotoLabel is not the last command")

    def check_propagate(self, c: int, command: Command) -> None:
        comp = self.component(c, command.arg1)
        props = self.properties(command.arg1, comp)
        simple = bool(props & _P_SIMPLE)
        if not 0 <= command.arg2 < len(self.computation.component_precomputed_indexes):
            raise self.error(c, "precomputed-indexes index out of range")
        if command.arg2 != 0 and simple:
            raise self.error(c, "precomputed-indexes index nonzero for a simple component")
        # A non-simple component may (rarely) have the empty matrix as input.
        if not (self.sub_ok(command.arg3, allow_zero=True) and (command.arg3 != 0 or not simple)
                and self.sub_ok(command.arg4)):
            raise self.error(c, "submatrix index out of range in Propagate")
        if command.arg3 > 0 and self.sub_cols[command.arg3] != comp.input_dim():
            raise self.error(c, f"input dim {self.sub_cols[command.arg3]} != component "
                             f"input-dim {comp.input_dim()}")
        if self.sub_cols[command.arg4] != comp.output_dim():
            raise self.error(c, f"output dim {self.sub_cols[command.arg4]} != component "
                             f"output-dim {comp.output_dim()}")
        if simple and self.sub_rows[command.arg3] != self.sub_rows[command.arg4]:
            raise self.error(c, "num-rows mismatch for a simple component")
        if command.arg3 == command.arg4 and not props & _P_PROPAGATE_IN_PLACE:
            raise self.error(c, "in-place propagation not supported by this component")
        if command.arg5 > 0:
            if command.arg5 in self.memo_to_command:
                raise self.error(c, f"memo index {command.arg5} re-used "
                                 f"(first by c{self.memo_to_command[command.arg5]})")
            self.memo_to_command[command.arg5] = c
        # arg6: store-stats flag (-1, our Command's default, reads as 0).
        if command.arg6 not in (-1, 0, 1):
            raise self.error(c, f"invalid store-stats flag {command.arg6}")

    def check_backprop(self, c: int, command: Command) -> None:
        comp = self.component(c, command.arg1)
        props = self.properties(command.arg1, comp)
        a3, a4, a5, a6, a7 = command.arg3, command.arg4, command.arg5, command.arg6, command.arg7
        if not 0 <= command.arg2 < len(self.computation.component_precomputed_indexes):
            raise self.error(c, "precomputed-indexes index out of range")
        if command.arg2 != 0 and props & _P_SIMPLE:
            raise self.error(c, "precomputed-indexes index nonzero for a simple component")
        # The output derivative is required; the others may be 0 (unused).
        if not (self.sub_ok(a3, True) and self.sub_ok(a4, True) and self.sub_ok(a5)
                and self.sub_ok(a6, True)):
            raise self.error(c, "submatrix index out of range in Backprop")
        if props & _P_BACKPROP_NEEDS_INPUT and a3 == 0:
            raise self.error(c, "Backprop needs the input value but it is not supplied")
        if props & _P_BACKPROP_NEEDS_OUTPUT and a4 == 0:
            raise self.error(c, "Backprop needs the output value but it is not supplied")
        if a6 == 0 and not props & _P_UPDATABLE:
            raise self.error(c, "Backprop has no effect (no input derivative, not updatable)")
        if a5 == a6 and not props & _P_BACKPROP_IN_PLACE:
            raise self.error(c, "in-place backprop not supported by this component")
        in_dim, out_dim = comp.input_dim(), comp.output_dim()
        for arg, dim, what in ((a3, in_dim, "input value"), (a4, out_dim, "output value"),
                               (a5, out_dim, "output derivative"), (a6, in_dim, "input derivative")):
            if arg != 0 and self.sub_cols[arg] != dim:
                raise self.error(c, f"{what} has dim {self.sub_cols[arg]}, component expects {dim}")
        if a3 != 0 and a6 != 0 and self.sub_rows[a3] != self.sub_rows[a6]:
            raise self.error(c, "num-rows mismatch between input value and input derivative")
        if a4 != 0 and self.sub_rows[a4] != self.sub_rows[a5]:
            raise self.error(c, "num-rows mismatch between output value and output derivative")
        if props & _P_SIMPLE and a6 != 0 and self.sub_rows[a5] != self.sub_rows[a6]:
            raise self.error(c, "num-rows mismatch between input and output derivative")
        # arg7: memo index; 0 (or our Command's default -1) = none.
        if a7 > 0:
            prop_c = self.memo_to_command.pop(a7, None)
            if prop_c is None:
                raise self.error(c, f"memo index {a7} not produced by an earlier Propagate")
            if self.computation.commands[prop_c].arg1 != command.arg1:
                raise self.error(c, f"memo {a7} comes from a Propagate of another component "
                                 f"(c{prop_c})")
            if not props & _P_USES_MEMO:
                raise self.error(c, "component not expected to use a memo")
        elif a7 < -1:
            raise self.error(c, f"invalid memo index {a7}")

    def check_rows(self, c: int, command: Command) -> None:
        a1, a2, k = command.arg1, command.arg2, command.arg3
        if not (self.sub_ok(a1) and self.sub_ok(a2) and 0 <= k < len(self.computation.indexes)):
            raise self.error(c, "index out of range in AddRows/CopyRows")
        indexes = self.computation.indexes[k]
        if len(indexes) != self.sub_rows[a1]:
            raise self.error(c, f"indexes[{k}] has {len(indexes)} entries for "
                             f"{self.sub_rows[a1]} rows")
        if self.sub_cols[a1] != self.sub_cols[a2]:
            raise self.error(c, "dimension mismatch in AddRows/CopyRows")
        if len(indexes) and (indexes.max() >= self.sub_rows[a2] or indexes.min() < -1):
            raise self.error(c, f"row index in indexes[{k}] out of range "
                             f"[-1, {self.sub_rows[a2]})")
        if a1 == a2:
            raise self.error(c, "AddRows/CopyRows from a submatrix to itself")

    def check_multi(self, c: int, command: Command) -> None:
        a1, k = command.arg1, command.arg2
        if not (self.sub_ok(a1) and 0 <= k < len(self.computation.indexes_multi)):
            raise self.error(c, "index out of range in a *Multi command")
        pairs = self.computation.indexes_multi[k]
        if len(pairs) != self.sub_rows[a1]:
            raise self.error(c, f"indexes_multi[{k}] has {len(pairs)} entries for "
                             f"{self.sub_rows[a1]} rows")
        if len(pairs) == 0:
            return
        sub, row = pairs[:, 0].astype(np.int64), pairs[:, 1].astype(np.int64)
        null = sub == -1
        if (row[null] != -1).any():
            raise self.error(c, f"indexes_multi[{k}]: row index must be -1 where the "
                             "submatrix is -1")
        s, r = sub[~null], row[~null]
        if ((s < 1) | (s >= self.num_submatrices)).any():
            raise self.error(c, f"indexes_multi[{k}]: submatrix index out of range")
        if ((r < 0) | (r >= self.sub_rows_array[s])).any():
            raise self.error(c, f"indexes_multi[{k}]: row index out of range")
        if (s == a1).any():
            raise self.error(c, "*Multi command copies from/to its own submatrix")
        if (self.sub_cols_array[s] != self.sub_cols[a1]).any():
            raise self.error(c, f"indexes_multi[{k}]: submatrix of mismatching dimension")
        # Duplicate destinations would need atomic adds in the CUDA kernels.
        if COMMAND_SPECS[command.command_type].writes_multi_rows():
            key = s * (int(self.sub_rows_array.max()) + 1) + r
            if len(unique_ints(key)) != len(key):
                raise self.error(c, f"indexes_multi[{k}]: duplicate (submatrix, row) element "
                                 "in a *ToRowsMulti command")

    def check_row_ranges(self, c: int, command: Command) -> None:
        a1, a2, k = command.arg1, command.arg2, command.arg3
        if not (self.sub_ok(a1) and self.sub_ok(a2)
                and 0 <= k < len(self.computation.indexes_ranges)):
            raise self.error(c, "index out of range in AddRowRanges")
        pairs = self.computation.indexes_ranges[k]
        if len(pairs) != self.sub_rows[a1]:
            raise self.error(c, f"indexes_ranges[{k}] has {len(pairs)} entries for "
                             f"{self.sub_rows[a1]} rows")
        if self.sub_cols[a1] != self.sub_cols[a2]:
            raise self.error(c, "dimension mismatch in AddRowRanges")
        first, end = pairs[:, 0], pairs[:, 1]
        ok = ((first == -1) & (end == -1)) | ((end > first) & (first >= 0)
                                              & (end <= self.sub_rows[a2]))
        if not ok.all():
            i = int(np.flatnonzero(~ok)[0])
            raise self.error(c, f"row range {first[i]},{end[i]} is invalid in AddRowRanges")


# The checks of an index table (by the table a command's spec names) and
# those particular to a command type (after the whole-matrix and index
# checks); the no-ops and allocation need none.
_INDEX_CHECKS = {IndexTable.INDEXES: IndexChecker.check_rows,
                 IndexTable.INDEXES_MULTI: IndexChecker.check_multi,
                 IndexTable.INDEXES_RANGES: IndexChecker.check_row_ranges}
_TYPE_CHECKS = {
    T.SET_CONST: IndexChecker.check_set_const,
    T.SWAP_MATRIX: IndexChecker.check_swap,
    T.PROPAGATE: IndexChecker.check_propagate,
    T.BACKPROP: IndexChecker.check_backprop,
    T.BACKPROP_NO_MODEL_UPDATE: IndexChecker.check_backprop,
    T.MATRIX_COPY: IndexChecker.check_copy_add,
    T.MATRIX_ADD: IndexChecker.check_copy_add,
    T.COMPRESS_MATRIX: IndexChecker.check_compress,
    T.ACCEPT_INPUT: IndexChecker.check_io,
    T.PROVIDE_OUTPUT: IndexChecker.check_io,
    T.GOTO_LABEL: IndexChecker.check_goto,
}
