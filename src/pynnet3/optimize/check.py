"""ComputationChecker (Kaldi's, from nnet-analyze): is a computation well formed?

Run on every computation the compiler produces and after every optimization
pass in tests.  The checks, in Kaldi's order:

* indexes (:mod:`.check_indexes`): every argument in range, dimensions
  consistent with each other and with the components, memos produced once
  and consumed once;
* matrix accesses: every matrix allocated before use, used, not used after
  it is freed, never allocated or freed twice;
* compression: CompressMatrix / DecompressMatrix pairs around the marker
  between the forward and backward commands;
* undefined: no part of a matrix read before it is written, every part of
  every matrix used;
* debug info sizes;
* rewrite (only before optimization): nothing modified after it was read.

A failure raises :class:`~pynnet3.errors.ComputationCheckError` naming the
command (and printing it) where one can be named.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from operator import itemgetter
from typing import Any

import numpy as np

from ..compile.computation import CommandType, CompressedMatrixType, NnetComputation
from ..errors import ComputationCheckError
from ..nnet.properties_cache import component_properties_cached
from .. import fast_paths
from .accesses import MatrixAccessesList, command_error
from .analysis import Analyzer, LazyAnalyzer, analyzer_of
from .arrays import type_mask, unique_ints
from .check_indexes import IndexChecker
from .variables import AccessType

__all__ = ["CheckComputationOptions", "ComputationChecker", "ComputationCheckError",
           "check_computation"]


@dataclass
class CheckComputationOptions:
    """Kaldi's CheckComputationOptions.

    ``check_rewrite``: also reject variables modified after being read (only
    valid before optimization, which re-uses matrices in place).
    ``check_unused_variables``: reject parts of matrices that are never used
    (off for looped computations, where a matrix swapped at the end may look
    unused).
    """

    check_rewrite: bool = False
    check_unused_variables: bool = True
    # Not in Kaldi's checker, but true of everything Kaldi's compiler and
    # optimizer produce: every matrix that is not handed to the user
    # (ProvideOutput) is deallocated (DeallocMatrix, or given away by a swap).
    check_deallocation: bool = True


_get_index = itemgetter(1)   # (node, Index) -> Index
_get_n = itemgetter(0)       # Index -> n

# Parts of a matrix that MatrixExtender (extend_matrices) may legitimately
# leave unused: within its last rows, not spanning all columns.  Must not
# exceed that pass's own proportion.
_EXTEND_MIN_PROPORTION = 0.8

_T_COMPRESS_MATRIX = int(CommandType.COMPRESS_MATRIX)
# Below this many variable accesses (times fast_paths.analysis_python_below)
# the rewrite and undefined checks loop over lists.
_LISTS_BELOW_FACTOR = 4
# Up to this many rows in all, the debug-info n columns are joined and
# checked with one min (one NumPy call instead of one per matrix).
_CONCAT_LIMIT = 200_000
_MASK_COMPRESSION = type_mask([CommandType.COMPRESS_MATRIX, CommandType.DECOMPRESS_MATRIX])


class ComputationChecker:
    """Kaldi's ComputationChecker; :meth:`check` once per object.

    Does not handle looped ('online') computations ending in GotoLabel
    directly: :func:`check_computation` rewrites those first.
    """

    def __init__(self, config: CheckComputationOptions, nnet: Any,
                 computation: NnetComputation) -> None:
        self.config = config
        self.nnet = nnet
        self.computation = computation

    analyzer = LazyAnalyzer()

    def check(self) -> None:
        self.check_computation_indexes()
        # (The analysis a pass made of this very computation, if any: the
        # same function of the same commands, submatrices and tables.)
        self.analyzer = analyzer_of(self.nnet, self.computation)
        self.check_computation_matrix_accesses()
        self.check_computation_compression()
        self.check_computation_undefined()
        self.check_computation_debug_info()
        if self.config.check_rewrite:
            self.check_computation_rewrite()

    # -- helpers -----------------------------------------------------------
    def _error(self, c: int, message: str) -> ComputationCheckError:
        return command_error(self.computation, self.nnet, c, message)

    def _variable_error(self, v: int, message: str, c: int | None = None) -> ComputationCheckError:
        desc = self.analyzer.variables.describe_variable(v)
        text = f"variable {v} = {desc} {message}"
        if c is None:
            return ComputationCheckError(text)
        return self._error(c, text)

    # -- rewrite -----------------------------------------------------------
    def check_computation_rewrite(self) -> None:
        """No variable is written after a command has only read it (true of
        unoptimized computations; optimization re-uses memory in place)."""
        table = self.analyzer.variable_accesses
        if len(table.types) < _LISTS_BELOW_FACTOR * fast_paths.current().analysis_python_below:
            self._check_rewrite_lists(table)
            return
        counts = table.num_accesses()
        if self.config.check_unused_variables and (counts == 0).any():
            v = int(np.flatnonzero(counts == 0)[0])
            raise self._variable_error(v, "is never used")
        if len(table.types) == 0:
            return
        # For each access, the number of pure reads of the same variable
        # before it: a global running count minus its value where the
        # variable's run of accesses begins.
        is_read = (table.types == AccessType.READ).astype(np.int64)
        reads_before = np.concatenate([[0], np.cumsum(is_read)])
        owner = np.repeat(np.arange(len(counts)), counts)
        before = reads_before[:-1] - reads_before[table.offsets[:-1]][owner]
        bad = (before > 0) & (is_read == 0)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise self._variable_error(int(owner[i]), "is modified after being read "
                                       "(not expected before optimization)",
                                       int(table.commands[i]))

    def _check_rewrite_lists(self, table: Any) -> None:
        """:meth:`check_computation_rewrite` by loops over lists (few accesses)."""
        offsets = table.offsets.tolist()
        if self.config.check_unused_variables:
            for v in range(len(offsets) - 1):
                if offsets[v + 1] == offsets[v]:
                    raise self._variable_error(v, "is never used")
        types = table.types.tolist()
        read = int(AccessType.READ)
        for v in range(len(offsets) - 1):
            read_before = False
            for i in range(offsets[v], offsets[v + 1]):
                if types[i] == read:
                    read_before = True
                elif read_before:
                    raise self._variable_error(v, "is modified after being read "
                                               "(not expected before optimization)",
                                               int(table.commands[i]))

    # -- undefined -----------------------------------------------------------
    def _unused_variable_ok(self, v: int) -> bool:
        """An unused variable is allowed only where extend_matrices leaves one."""
        info = self.analyzer.variables.variable_info(v)
        m = self.computation.matrices[info.matrix_index]
        # (float32 product, as Kaldi's BaseFloat arithmetic)
        return (info.row_offset >= np.float32(_EXTEND_MIN_PROPORTION) * np.float32(m.num_rows)
                and not (info.col_offset == 0 and info.num_cols == m.num_cols))

    def check_computation_undefined(self) -> None:
        """No variable is read before it is written, and (optionally) every
        variable is used."""
        table = self.analyzer.variable_accesses
        if len(table.types) < _LISTS_BELOW_FACTOR * fast_paths.current().analysis_python_below:
            self._check_undefined_lists(table)
            return
        counts = table.num_accesses()
        if self.config.check_unused_variables:
            for v in np.flatnonzero(counts == 0).tolist():
                if not self._unused_variable_ok(v):
                    raise self._variable_error(v, "is never used")
        used = np.flatnonzero(counts > 0)
        if len(used) == 0:
            return
        first = table.offsets[used]
        first_cmd = table.commands[first]
        compress = self.computation.command_table()[:, 0] == _T_COMPRESS_MATRIX
        # A compressed matrix may hold undefined parts that are never read back.
        bad = (table.types[first] != AccessType.WRITE) & ~compress[first_cmd]
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise self._variable_error(int(used[i]), "is read before it is written to",
                                       int(first_cmd[i]))

    def _check_undefined_lists(self, table: Any) -> None:
        """:meth:`check_computation_undefined` by loops over lists (few accesses)."""
        offsets = table.offsets.tolist()
        num_variables = len(offsets) - 1
        if self.config.check_unused_variables:
            for v in range(num_variables):
                if offsets[v + 1] == offsets[v] and not self._unused_variable_ok(v):
                    raise self._variable_error(v, "is never used")
        types = table.types.tolist()
        commands = table.commands.tolist()
        command_types = self.computation.command_table()[:, 0].tolist()
        write = int(AccessType.WRITE)
        for v in range(num_variables):
            lo = offsets[v]
            if offsets[v + 1] > lo and types[lo] != write:
                c = commands[lo]
                # A compressed matrix may hold undefined parts never read back.
                if command_types[c] != _T_COMPRESS_MATRIX:
                    raise self._variable_error(v, "is read before it is written to", c)

    # -- matrix accesses -------------------------------------------------------
    def check_computation_matrix_accesses(self) -> None:
        """Allocation before use, some use, no use after deallocation."""
        for m in self._suspect_matrices():
            a = self.analyzer.matrix_accesses[m]
            if a.allocate_command == -1:
                if a.accesses:
                    raise self._error(a.accesses[0].command_index,
                                      f"matrix m{m} is accessed but never initialized")
                if a.deallocate_command != -1:
                    raise self._error(a.deallocate_command,
                                      f"matrix m{m} is destroyed but never initialized")
                raise ComputationCheckError(f"matrix m{m} is not initialized")
            if not a.accesses:
                # (Kaldi's checker rejects an unused input matrix too.)
                raise self._error(a.allocate_command, f"matrix m{m} is never accessed")
            if a.accesses[0].command_index < a.allocate_command:
                raise self._error(a.accesses[0].command_index,
                                  f"matrix m{m} is accessed before it is initialized "
                                  f"(by c{a.allocate_command})")
            if (self.config.check_deallocation and a.deallocate_command == -1
                    and not a.is_output):
                raise self._error(a.allocate_command, f"matrix m{m} is never deallocated "
                                  "and is not an output of the computation")
            if a.deallocate_command != -1 and a.accesses[-1].command_index >= a.deallocate_command:
                raise self._error(a.accesses[-1].command_index,
                                  f"matrix m{m} is accessed after it is destroyed "
                                  f"(by c{a.deallocate_command})")

    def _suspect_matrices(self) -> range | list[int]:
        """The matrices :meth:`check_computation_matrix_accesses` may reject
        (found with array operations; all of them without the arrays)."""
        ma = self.analyzer.matrix_accesses
        if not isinstance(ma, MatrixAccessesList) or len(ma) < fast_paths.current().check_arrays_from:
            return range(1, len(ma))
        bounds = ma.bounds[1:]
        count = np.diff(bounds)
        acc = np.concatenate([ma.access_commands, [-1]])
        first = np.where(count > 0, acc[bounds[:-1]], -1)
        last = np.where(count > 0, acc[np.maximum(bounds[1:] - 1, 0)], -1)
        alloc = np.array(ma.allocate[1:], dtype=np.int64)
        dealloc = np.array(ma.deallocate[1:], dtype=np.int64)
        bad = (alloc == -1) | (count == 0) | (first < alloc)
        bad |= (dealloc != -1) & (last >= dealloc)
        if self.config.check_deallocation:
            bad |= (dealloc == -1) & ~np.array(ma.is_output[1:], dtype=bool)
        return (np.flatnonzero(bad) + 1).tolist()

    # -- compression -----------------------------------------------------------
    def _compression_matrices(self) -> range | list[int]:
        """The matrices :meth:`check_computation_compression` may reject:
        those accessed by a CompressMatrix or DecompressMatrix (found with
        array operations; all of them without the arrays)."""
        ma = self.analyzer.matrix_accesses
        if not isinstance(ma, MatrixAccessesList):
            return range(1, len(ma))
        types = self.computation.command_table()[:, 0]
        if not _MASK_COMPRESSION[types].any():
            return []
        involved = _MASK_COMPRESSION[types[ma.access_commands]]
        owner = np.searchsorted(ma.bounds, np.flatnonzero(involved), side="right") - 1
        return unique_ints(owner).tolist()

    def check_computation_compression(self) -> None:
        commands = self.computation.commands
        T = CommandType
        matrices = self._compression_matrices()
        if not matrices:
            return
        middle = next((i for i, c in enumerate(commands)
                       if c.command_type is CommandType.NO_OPERATION_MARKER), -1)
        for m in matrices:
            acc = self.analyzer.matrix_accesses[m].accesses
            for a, access in enumerate(acc):
                c = access.command_index
                command = commands[c]
                if command.command_type is T.DECOMPRESS_MATRIX:
                    if a == 0 or commands[acc[a - 1].command_index].command_type \
                            is not T.COMPRESS_MATRIX:
                        raise self._error(c, f"matrix m{m} decompressed without being compressed "
                                          "by its previous access")
                if command.command_type is T.COMPRESS_MATRIX:
                    nxt = acc[a + 1].command_index if a + 1 < len(acc) else -1
                    if (nxt == -1 or commands[nxt].command_type is not T.DECOMPRESS_MATRIX
                            or not c < middle < nxt):
                        raise self._error(c, f"matrix m{m} compressed, but its next access is not "
                                          "a decompression after the forward/backward marker")
                    if command.alpha == 0.0:
                        # Sign-only compression is for ReLU outputs: compress,
                        # decompress, then the ReLU's backprop and nothing else.
                        if not (a > 0 and command.arg2 == CompressedMatrixType.UINT8
                                and len(acc) == a + 3):
                            raise self._error(c, "sign-only compression (alpha=0) not in the "
                                              "expected ReLU pattern")
                        after = commands[acc[a + 2].command_index]
                        if not (after.command_type is T.BACKPROP
                                and self.nnet.get_component(after.arg1).type_name
                                == "RectifiedLinearComponent"):
                            raise self._error(acc[a + 2].command_index,
                                              "sign-only compressed matrix used by something "
                                              "other than a RectifiedLinearComponent backprop")

    # -- debug info ------------------------------------------------------------
    def check_computation_debug_info(self) -> None:
        info = self.computation.matrix_debug_info
        if not info:
            return
        if len(info) != len(self.computation.matrices):
            raise ComputationCheckError(f"debug info has {len(info)} entries for "
                                        f"{len(self.computation.matrices)} matrices")
        if len(info) >= fast_paths.current().check_arrays_from and self._debug_info_ok(info):
            return
        checked: set[int] = set()    # lists shared by several matrices are checked once
        for m in range(1, len(info)):
            if len(info[m].cindexes) != self.computation.matrices[m].num_rows:
                raise ComputationCheckError(f"debug info for matrix m{m} has "
                                            f"{len(info[m].cindexes)} cindexes for "
                                            f"{self.computation.matrices[m].num_rows} rows")
            cindexes = info[m].cindexes
            if id(cindexes) in checked:
                continue
            checked.add(id(cindexes))
            array = getattr(cindexes, "array", None)   # array-backed (node, n, t, x)
            if array is not None:
                negative = len(array) > 0 and int(array[:, 1].min()) < 0
            else:
                # (map with C-level itemgetters: these lists hold every cindex)
                negative = bool(cindexes) and min(map(_get_n, map(_get_index, cindexes))) < 0
            if negative:
                raise ComputationCheckError(f"negative n index in debug info of matrix m{m}")

    def _debug_info_ok(self, info: list) -> bool:
        """True if the loop of :meth:`check_computation_debug_info` would
        find nothing wrong: every list as long as its matrix, no negative n
        (the n columns of all array-backed lists checked together; a list
        laid out regularly in n and not yet expanded is checked on its
        first copy, whose n are the smallest)."""
        lists = [d.cindexes for d in info[1:]]
        if list(map(len, lists)) != [m.num_rows for m in self.computation.matrices[1:]]:
            return False
        arrays = []
        for x in {id(x): x for x in lists}.values():
            if not len(x):
                continue
            if not getattr(x, "is_built", True):
                tiling = x.n_tiling
                if tiling is not None and tiling.n_col == 1:
                    arrays.append(tiling.base)
                    continue
            array = getattr(x, "array", None)
            if array is None:
                if min(map(_get_n, map(_get_index, x))) < 0:
                    return False
            else:
                arrays.append(array)
        if not arrays:
            return True
        if sum(map(len, arrays)) <= _CONCAT_LIMIT:
            return int(np.concatenate(arrays)[:, 1].min()) >= 0
        return all(int(a[:, 1].min()) >= 0 for a in arrays)

    # -- indexes -----------------------------------------------------------------
    def check_computation_indexes(self) -> None:
        """Arguments in range and dimensions consistent (Kaldi's
        CheckComputationIndexes, plus a range check of the submatrices)."""
        IndexChecker(self.nnet, self.computation).run()


def _online_to_checkable(computation: NnetComputation) -> NnetComputation:
    """A looped computation ends with swaps then a goto; the swaps would look
    like second allocations, so they become deallocations of their second
    argument for checking."""
    commands = list(computation.commands)
    c = len(commands) - 2
    while c >= 0 and commands[c].command_type is CommandType.SWAP_MATRIX:
        old = commands[c]
        commands[c] = replace(old, command_type=CommandType.DEALLOC_MATRIX,
                              arg1=old.arg2, arg2=old.arg1)
        c -= 1
    return replace(computation, commands=commands)


def check_computation(nnet: Any, computation: NnetComputation, check_rewrite: bool = False,
                      check_unused_variables: bool = True,
                      check_deallocation: bool = True) -> Analyzer | None:
    """Kaldi's CheckComputation: raises ComputationCheckError if the
    computation is malformed.  Use ``check_rewrite=True`` only before
    optimization.  Looped computations (ending in GotoLabel) are checked with
    their final swaps turned into deallocations and unused parts allowed.

    Returns the Analyzer of the checked computation (None for a looped one,
    whose checked form differs from it): a caller that optimizes the same,
    unchanged computation next may hand it to the optimizer rather than
    analyse the computation again."""
    opts = CheckComputationOptions(check_rewrite, check_unused_variables, check_deallocation)
    if computation.commands and computation.commands[-1].command_type is CommandType.GOTO_LABEL:
        computation = _online_to_checkable(computation)
        opts.check_unused_variables = False
        opts.check_deallocation = False   # the state carried to the next chunk stays
        with component_properties_cached():
            ComputationChecker(opts, nnet, computation).check()
        return None
    with component_properties_cached():
        checker = ComputationChecker(opts, nnet, computation)
        checker.check()
    return checker.analyzer

