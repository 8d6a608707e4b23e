"""What each command reads and writes, and every variable's and matrix's
accesses in command order: Kaldi's CommandAttributes (ComputeCommandAttributes),
VariableAccesses (ComputeVariableAccesses) and MatrixAccesses
(ComputeMatrixAccesses), from nnet-analyze.

Commands are handled per command type on the command table (one int array
of every command's type and arguments), so a computation of thousands of
commands is turned into (command, submatrix, access) records by a few
dozen array operations; which argument is read or written comes from the
command specs of :mod:`pynnet3.compile.computation`.  Where that finds an
argument out of range, the command-by-command loop runs instead, to name
the first bad command.  Expanding the records to variables, merging
duplicates and regrouping by variable or by matrix are array operations too,
and the per-command and per-matrix records are made only for the commands
and matrices a pass asks about.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, NamedTuple, Sequence

import numpy as np

from ..compile.computation import (COMMAND_SPECS, ArgAccess, CommandType, IndexTable,
                                   NnetComputation)
from .. import fast_paths
from ..errors import ComputationCheckError
from ..numba_cache import lazy_njit
from ..nnet.components.base import Prop
from .arrays import rows_with_type, type_mask, unique_ints
from .check_common import command_error, command_text, properties_array  # noqa: F401 (re-exported)
from .variables import _R, _RW, _W, AccessType, ComputationVariables

__all__ = ["Access", "CommandAttributes", "MatrixAccesses", "CommandAttributesList",
           "MatrixAccessesList", "VariableAccessTable", "compute_command_attributes",
           "compute_variable_accesses", "compute_matrix_accesses", "command_text",
           "command_error", "access_records_from_table", "properties_array"]

_ACCESS_TYPES = (AccessType.READ, AccessType.WRITE, AccessType.READ_WRITE)
_TUPLE_NEW = tuple.__new__


class Access(NamedTuple):
    """One command's access to a variable or matrix."""

    command_index: int
    access_type: AccessType


@dataclass(slots=True)
class CommandAttributes:
    """What one command reads and writes.  Every list is sorted and unique.

    A variable (or matrix) both read and written appears in both lists; an
    operation that adds to its output, or writes only some of the rows,
    counts as reading the old contents too.
    """

    variables_read: list[int] = field(default_factory=list)
    variables_written: list[int] = field(default_factory=list)
    submatrices_read: list[int] = field(default_factory=list)
    submatrices_written: list[int] = field(default_factory=list)
    matrices_read: list[int] = field(default_factory=list)
    matrices_written: list[int] = field(default_factory=list)
    # True for commands that change the model (Backprop of an updatable
    # component), which an optimizer must never drop.
    has_side_effects: bool = False


@dataclass(slots=True)
class MatrixAccesses:
    """Lifetime and accesses of one matrix.

    ``allocate_command`` is the AllocMatrix, SwapMatrix (as destination) or
    first AcceptInput command, -1 if none; ``deallocate_command`` the
    DeallocMatrix or SwapMatrix (as source) command, -1 if none.  Allocation,
    deallocation and swapping are not accesses; AcceptInput is a write.
    """

    allocate_command: int = -1
    deallocate_command: int = -1
    accesses: list[Access] = field(default_factory=list)
    is_input: bool = False
    is_output: bool = False


# ---------------------------------------------------------------------------
# Command attributes
# ---------------------------------------------------------------------------

# Up to this many records, _merge_records merges them in a dict and sorts
# the keys (a few microseconds) rather than with a dozen NumPy calls.
_MERGE_PYTHON_BELOW = 128


def _merge_records(cmd: np.ndarray, item: np.ndarray, flag: np.ndarray,
                   num_items: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sort (command, item, flag) records by command then item, merging
    duplicates by OR-ing their flags."""
    if len(cmd) == 0:
        return cmd, item, flag
    if len(cmd) < _MERGE_PYTHON_BELOW:
        merged_flags: dict[tuple[int, int], int] = {}
        get = merged_flags.get
        for key, f in zip(zip(cmd.tolist(), item.tolist()), flag.tolist()):
            merged_flags[key] = get(key, 0) | f
        keys = sorted(merged_flags)
        return (np.array([k[0] for k in keys], dtype=np.int64),
                np.array([k[1] for k in keys], dtype=np.int64),
                np.array([merged_flags[k] for k in keys], dtype=np.int64))
    base = max(num_items, int(item.max()) + 1, 1)
    # (The flag, 1..3, rides in the low two bits of the sort key.)
    key = np.sort((cmd * base + item) * 4 + flag)
    merged = key & 3
    key >>= 2
    starts = np.flatnonzero(np.concatenate([[True], key[1:] != key[:-1]]))
    merged = np.bitwise_or.reduceat(merged, starts)
    key = key[starts]
    cmd = key // base
    return cmd, key - cmd * base, merged


_P_BACKPROP_ADDS = int(Prop.BACKPROP_ADDS)
_P_PROPAGATE_ADDS = int(Prop.PROPAGATE_ADDS)
_P_UPDATABLE = int(Prop.UPDATABLE)


# ---------------------------------------------------------------------------
# Command attributes
# ---------------------------------------------------------------------------

_ACCESS_FLAG = {ArgAccess.READ: _R, ArgAccess.WRITE: _W, ArgAccess.READ_WRITE: _RW}


def _merge_records_in_dict(item: Sequence[int], cmd: Sequence[int], flag: Sequence[int],
                           num_items: int) -> tuple[list[int], list[int], list[int]]:
    """_merge_records for few records, as Python lists: the (item, command)
    pairs in sorted order with their access flags or-ed together, as
    (commands, access types, per-item offsets into them)."""
    merged: dict[tuple[int, int], int] = {}
    get = merged.get
    for key, f in zip(zip(item, cmd), flag):
        merged[key] = get(key, 0) | f
    keys = sorted(merged)
    offsets = [0] * (num_items + 1)
    for i, _ in keys:
        offsets[i + 1] += 1
    for i in range(num_items):
        offsets[i + 1] += offsets[i]
    return [k[1] for k in keys], [merged[k] - 1 for k in keys], offsets


def _rule(t: CommandType, access: ArgAccess) -> str:
    """The rule that decides an access the command spec leaves to the data:
    W, or RW when the component adds / when some row has no source."""
    if access is ArgAccess.COMPONENT_OUTPUT:
        return "propagate-output" if t is CommandType.PROPAGATE else "backprop-in-deriv"
    if access is ArgAccess.INDEXED_ROWS:
        return "copy-rows-dest"
    raise ImportError(f"no access rule for {access} of {t.name}")


def _build_plans() -> dict[CommandType, list[tuple[int, int | str]]]:
    """Per command type: (0-based argument, flag or rule) of each access,
    from the command specs."""
    plans: dict[CommandType, list[tuple[int, int | str]]] = {}
    for t, spec in COMMAND_SPECS.items():
        plan: list[tuple[int, int | str]] = []
        for i, access in enumerate(spec.access):
            if access is ArgAccess.NONE:
                continue
            plan.append((i, _ACCESS_FLAG.get(access) or _rule(t, access)))
        if spec.index_table is IndexTable.INDEXES_MULTI:
            plan.append((spec.index_arg - 1, "multi"))
        plans[t] = plan
    return plans


# Access to the submatrices listed in an indexes_multi table.
_MULTI_FLAG = {t: _ACCESS_FLAG[s.multi_access] for t, s in COMMAND_SPECS.items()
               if s.index_table is IndexTable.INDEXES_MULTI}


_PLANS = _build_plans()


def _per_command(cmd: np.ndarray, item: np.ndarray, num_commands: int) -> list[list[int]]:
    """Split items (sorted by command) into one list per command."""
    bounds = np.searchsorted(cmd, np.arange(num_commands + 1)).tolist()
    items = item.tolist()
    return [items[bounds[c]:bounds[c + 1]] for c in range(num_commands)]


class _Records:
    """(command, submatrix, flag) records of every submatrix access."""

    def __init__(self) -> None:
        self.cmd: list[int] = []
        self.sub: list[int] = []
        self.flag: list[int] = []

    def add(self, c: int, s: int, f: int) -> None:
        if s != 0:
            self.cmd.append(c)
            self.sub.append(s)
            self.flag.append(f)


def _submatrix_access_records_loop(nnet: Any, computation: NnetComputation,
                                   side_effects: list[bool]) -> _Records:
    """The per-command loop: each command's submatrix accesses, with Kaldi's
    property- and index-dependent refinements.  :func:`_submatrix_access_records`
    does the same on arrays; this version runs when that one finds a bad
    argument, so that the error names the first bad command."""
    rec = _Records()
    components = nnet.components if nnet is not None else []
    props_cache: dict[int, int] = {}

    def props(c: int, comp: int) -> int:
        p = props_cache.get(comp)
        if p is None:
            if not 0 <= comp < len(components):
                raise command_error(computation, nnet, c, f"component index {comp} out of range")
            p = props_cache[comp] = int(components[comp].properties())
        return p

    minus_one: dict[int, bool] = {}
    multi_subs: dict[int, list[int]] = {}
    for c, command in enumerate(computation.commands):
        t = command.command_type
        args = command.args
        for pos, how in _PLANS[t]:
            s = args[pos]
            if isinstance(how, int):
                rec.add(c, s, how)
            elif how == "propagate-output":
                rec.add(c, s, _RW if props(c, args[0]) & _P_PROPAGATE_ADDS else _W)
            elif how == "backprop-in-deriv":
                rec.add(c, s, _RW if props(c, args[0]) & _P_BACKPROP_ADDS else _W)
            elif how == "copy-rows-dest":
                k = args[2]
                if k not in minus_one:
                    if not 0 <= k < len(computation.indexes):
                        raise command_error(computation, nnet, c, f"indexes index {k} out of range")
                    minus_one[k] = bool((computation.indexes[k] == -1).any())
                rec.add(c, s, _RW if minus_one[k] else _W)
            else:  # "multi": the submatrices named in an indexes_multi table
                if s not in multi_subs:
                    if not 0 <= s < len(computation.indexes_multi):
                        raise command_error(computation, nnet, c,
                                            f"indexes_multi index {s} out of range")
                    u = unique_ints(computation.indexes_multi[s][:, 0])
                    multi_subs[s] = u[u != -1].tolist()
                flag = _MULTI_FLAG[t]
                for sub in multi_subs[s]:
                    rec.add(c, sub, flag)
        if t is CommandType.BACKPROP and props(c, args[0]) & _P_UPDATABLE:
            side_effects[c] = True
    return rec


_T_BACKPROP = int(CommandType.BACKPROP)
_T_BACKPROP_NO_MODEL_UPDATE = int(CommandType.BACKPROP_NO_MODEL_UPDATE)
_T_PROPAGATE = int(CommandType.PROPAGATE)
_T_COPY_ROWS = int(CommandType.COPY_ROWS)
_NUM_TYPES = len(CommandType)


def _build_flag_tables() -> tuple[np.ndarray, dict[str, tuple[np.ndarray, int]]]:
    """From the plans: the fixed flag of each (command type, 0-based
    argument) (0 = no access, or decided by a rule), and per rule the
    command types it applies to and the argument it decides."""
    flags = np.zeros((_NUM_TYPES, 7), dtype=np.int64)
    rules: dict[str, tuple[list[int], set[int]]] = {}
    for t, plan in _PLANS.items():
        for pos, how in plan:
            if isinstance(how, int):
                flags[int(t), pos] = how
            else:
                types, positions = rules.setdefault(how, ([], set()))
                types.append(int(t))
                positions.add(pos)
    out: dict[str, tuple[np.ndarray, int]] = {}
    for how, (types, positions) in rules.items():
        if len(positions) != 1:
            raise ImportError(f"access rule {how!r} applies to several argument positions")
        out[how] = (type_mask(types), positions.pop())
    return flags, out


_FLAGS, _RULES = _build_flag_tables()
if set(_RULES) != {"propagate-output", "backprop-in-deriv", "copy-rows-dest", "multi"}:
    raise ImportError("accesses: unexpected access rules")
_MULTI_TYPE_FLAG = np.zeros(_NUM_TYPES, dtype=np.int64)
for _t, _f in _MULTI_FLAG.items():
    _MULTI_TYPE_FLAG[int(_t)] = _f


class _BadArgument(Exception):
    """Raised inside the array version when an argument is out of range."""


def _component_properties(nnet: Any, component_indexes: np.ndarray,
                          cache: dict[str, np.ndarray]) -> np.ndarray:
    """Property flags (int64) of the given component indexes (``cache``
    keeps the flags of all components, fetched on first use)."""
    if len(component_indexes) == 0:
        return np.zeros(0, dtype=np.int64)
    flags = cache.get("all")
    if flags is None:
        flags = cache["all"] = properties_array(nnet)
    if component_indexes.min() < 0 or component_indexes.max() >= len(flags):
        raise _BadArgument()
    return flags[component_indexes]


def access_records_from_table(nnet: Any, table: np.ndarray, indexes: Sequence[np.ndarray],
                              indexes_multi: Sequence[np.ndarray], num_submatrices: int,
                              cache: dict[Any, Any] | None = None
                              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every command's submatrix accesses as arrays (command, submatrix,
    flag), in no particular order, and the commands with side effects (a
    bool array), from the command table and the index tables.  Raises
    :class:`_BadArgument` (or ComputationCheckError for a submatrix out of
    range) where the command-by-command loop would raise.  ``cache`` may
    hold what is known about the index tables from an earlier call on the
    same (unchanged) arrays."""
    num_commands = len(table)
    if cache is None:
        cache = {}
    fp = fast_paths.current()
    # (Once this process has loaded the compiled loop, it beats both others
    # from fast_paths' analysis_jit_loaded_from on.)
    if fp.analysis_loop_loaded(_records_kernel, num_commands):
        return _records_jit(nnet, table, indexes, indexes_multi, num_submatrices, cache)
    if num_commands < fp.analysis_python_below:
        return _records_python(nnet, table, indexes, indexes_multi, num_submatrices, cache)
    if fp.analysis_jit and num_submatrices >= fp.analysis_jit_from:
        return _records_jit(nnet, table, indexes, indexes_multi, num_submatrices, cache)
    side_effects = np.zeros(num_commands, dtype=bool)
    types = table[:, 0]
    if num_commands and (types.min() < 0 or types.max() >= _NUM_TYPES):
        raise _BadArgument()
    args = table[:, 1:]
    flags = _FLAGS[types]
    extra: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    # Component commands: whether they add to their output (or input
    # derivative) depends on the component.
    for how, bit in (("propagate-output", _P_PROPAGATE_ADDS),
                     ("backprop-in-deriv", _P_BACKPROP_ADDS)):
        which, pos = _RULES[how]
        sel = np.flatnonzero(which[types])
        if len(sel):
            props = _component_properties(nnet, table[sel, 1], cache)
            flags[sel, pos] = np.where((props & bit) != 0, _RW, _W)
            if how == "backprop-in-deriv":
                updates = (props & _P_UPDATABLE) != 0
                side_effects[sel[updates & (types[sel] == _T_BACKPROP)]] = True
    # CopyRows leaves rows with index -1 alone: then it reads its output too.
    which, pos = _RULES["copy-rows-dest"]
    sel = np.flatnonzero(which[types])
    if len(sel):
        k = table[sel, 3]
        if k.min() < 0 or k.max() >= len(indexes):
            raise _BadArgument()
        minus_one = cache.setdefault("minus_one", {})
        unique = unique_ints(k)
        has = []
        for i in unique.tolist():
            arr = indexes[i]
            entry = minus_one.get(id(arr))
            if entry is None or entry[0] is not arr:
                entry = minus_one[id(arr)] = (arr, bool((arr == -1).any()))
            has.append(entry[1])
        has_minus_one = np.array(has, dtype=bool)[np.searchsorted(unique, k)]
        flags[sel, pos] = np.where(has_minus_one, _RW, _W)
    # *Multi commands access every submatrix their table names.
    which, pos = _RULES["multi"]
    sel = np.flatnonzero(which[types])
    if len(sel):
        ks = table[sel, pos + 1]
        if ks.min() < 0 or ks.max() >= len(indexes_multi):
            raise _BadArgument()
        subs_of = cache.setdefault("multi_subs", {})
        lists = []
        for i in ks.tolist():   # (few: the *Multi commands)
            arr = indexes_multi[i]
            entry = subs_of.get(id(arr))
            if entry is None or entry[0] is not arr:
                u = unique_ints(arr[:, 0])
                entry = subs_of[id(arr)] = (arr, u[u != -1].astype(np.int64))
            lists.append(entry[1])
        lengths = np.array([len(x) for x in lists], dtype=np.int64)
        flat = np.concatenate(lists) if lists else np.zeros(0, dtype=np.int64)
        extra = (np.repeat(sel, lengths), flat,
                 np.repeat(_MULTI_TYPE_FLAG[types[sel]], lengths))
    present = (flags != 0) & (args != 0)
    cmd, pos_ = np.nonzero(present)
    sub = args[cmd, pos_]
    flag = flags[cmd, pos_]
    cmd = cmd.astype(np.int64, copy=False)
    if extra is not None:
        cmd = np.concatenate([cmd, extra[0]])
        sub = np.concatenate([sub, extra[1]])
        flag = np.concatenate([flag, extra[2]])
    bad = (sub < 0) | (sub >= num_submatrices)
    if bad.any():
        raise _BadArgument()
    return cmd, sub, flag, side_effects


# Per command type (int): the (0-based argument, flag or rule) of each
# fixed-position access, in argument order; and the argument holding the
# indexes_multi table (-1 if none).
_PLANS_BY_TYPE = [[(pos, how) for pos, how in _PLANS[CommandType(t)] if how != "multi"]
                  for t in range(_NUM_TYPES)]
_MULTI_POS_BY_TYPE = [next((pos for pos, how in _PLANS[CommandType(t)] if how == "multi"), -1)
                      for t in range(_NUM_TYPES)]
_MULTI_FLAG_BY_TYPE = _MULTI_TYPE_FLAG.tolist()


# The plans as arrays for _records_kernel: per command type, the 0-based
# argument and the flag (1-3) or rule (negative) of each fixed-position access.
_HOW_CODE = {"copy-rows-dest": -1, "propagate-output": -2, "backprop-in-deriv": -3}
_PLAN_LEN = np.array([len(p) for p in _PLANS_BY_TYPE], dtype=np.int64)
_PLAN_POS = np.full((_NUM_TYPES, 8), -1, dtype=np.int64)
_PLAN_HOW = np.zeros((_NUM_TYPES, 8), dtype=np.int64)
for _t, _plan in enumerate(_PLANS_BY_TYPE):
    for _j, (_pos, _how) in enumerate(_plan):
        _PLAN_POS[_t, _j] = _pos
        _PLAN_HOW[_t, _j] = _how if isinstance(_how, int) else _HOW_CODE[_how]
_MULTI_POS = np.array(_MULTI_POS_BY_TYPE, dtype=np.int64)


def _records_jit(nnet: Any, table: np.ndarray, indexes: Sequence[np.ndarray],
                 indexes_multi: Sequence[np.ndarray], num_submatrices: int,
                 cache: dict[Any, Any]
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`access_records_from_table` by :func:`_records_kernel`: the
    same records in the same order, the same :class:`_BadArgument`."""
    props = cache.get("all")
    if props is None:
        props = cache["all"] = properties_array(nnet)
    # Which index tables have a -1 (CopyRows then reads its output too),
    # and the submatrices each indexes_multi table names, from the per-table
    # caches (tables are compared by identity).
    minus_one = cache.setdefault("minus_one", {})
    has_minus_one = np.empty(len(indexes), dtype=np.bool_)
    for k, arr in enumerate(indexes):
        entry = minus_one.get(id(arr))
        if entry is None or entry[0] is not arr:
            entry = minus_one[id(arr)] = (arr, bool((arr == -1).any()))
        has_minus_one[k] = entry[1]
    subs_of = cache.setdefault("multi_subs", {})
    lists = []
    for arr in indexes_multi:
        entry = subs_of.get(id(arr))
        if entry is None or entry[0] is not arr:
            u = unique_ints(arr[:, 0])
            entry = subs_of[id(arr)] = (arr, u[u != -1].astype(np.int64))
        lists.append(entry[1])
    multi_offsets = np.zeros(len(lists) + 1, dtype=np.int64)
    if lists:
        np.cumsum([len(x) for x in lists], out=multi_offsets[1:])
        multi_values = np.concatenate(lists)
    else:
        multi_values = np.zeros(0, dtype=np.int64)
    ok, cmd, sub, flag, side_effects = _records_kernel(
        np.ascontiguousarray(table, dtype=np.int64), _PLAN_LEN, _PLAN_POS, _PLAN_HOW,
        _MULTI_POS, _MULTI_TYPE_FLAG, props, has_minus_one, multi_offsets, multi_values,
        num_submatrices)
    if not ok:
        raise _BadArgument()
    return cmd, sub, flag, side_effects


@lazy_njit(cache=True, nogil=True)
def _records_kernel(table, plan_len, plan_pos, plan_how, multi_pos, multi_flag, props,
                    has_minus_one, multi_offsets, multi_values, num_submatrices):
    """The loop of :func:`_records_python` compiled: (ok, cmd, sub, flag,
    side_effects); ok False where it raises _BadArgument."""
    n = table.shape[0]
    num_types = plan_len.shape[0]
    side_effects = np.zeros(n, dtype=np.bool_)
    cap = 0
    for c in range(n):
        t = table[c, 0]
        if t < 0 or t >= num_types:
            return False, table[:0, 0].copy(), table[:0, 0].copy(), table[:0, 0].copy(), \
                side_effects
        cap += plan_len[t]
        if multi_pos[t] >= 0:
            k = table[c, multi_pos[t] + 1]
            if k < 0 or k >= multi_offsets.shape[0] - 1:
                return False, table[:0, 0].copy(), table[:0, 0].copy(), table[:0, 0].copy(), \
                    side_effects
            cap += multi_offsets[k + 1] - multi_offsets[k]
    cmd = np.empty(cap, dtype=np.int64)
    sub = np.empty(cap, dtype=np.int64)
    flag = np.empty(cap, dtype=np.int64)
    bad = False
    r = 0
    for c in range(n):
        t = table[c, 0]
        for j in range(plan_len[t]):
            pos = plan_pos[t, j]
            how = plan_how[t, j]
            if how == -1:          # copy-rows-dest
                k = table[c, 3]
                if k < 0 or k >= has_minus_one.shape[0]:
                    bad = True
                    break
                how = 3 if has_minus_one[k] else 2
            elif how < 0:          # the component decides
                comp = table[c, 1]
                if comp < 0 or comp >= props.shape[0]:
                    bad = True
                    break
                p = props[comp]
                if how == -2:      # propagate-output
                    how = 3 if p & _P_PROPAGATE_ADDS else 2
                else:              # backprop-in-deriv
                    how = 3 if p & _P_BACKPROP_ADDS else 2
                    if t == _T_BACKPROP and p & _P_UPDATABLE:
                        side_effects[c] = True
            s = table[c, pos + 1]
            if s != 0:
                cmd[r] = c
                sub[r] = s
                flag[r] = how
                r += 1
        if bad:
            break
    if not bad:
        for c in range(n):
            t = table[c, 0]
            if multi_pos[t] >= 0:
                k = table[c, multi_pos[t] + 1]
                for i in range(multi_offsets[k], multi_offsets[k + 1]):
                    cmd[r] = c
                    sub[r] = multi_values[i]
                    flag[r] = multi_flag[t]
                    r += 1
        for i in range(r):
            if sub[i] < 0 or sub[i] >= num_submatrices:
                bad = True
                break
    return not bad, cmd[:r].copy(), sub[:r].copy(), flag[:r].copy(), side_effects


def _records_python(nnet: Any, table: np.ndarray, indexes: Sequence[np.ndarray],
                    indexes_multi: Sequence[np.ndarray], num_submatrices: int,
                    cache: dict[Any, Any]
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`access_records_from_table` by a loop over the commands (for
    small computations, where its few dozen array calls cost more): the
    same records in the same order, the same :class:`_BadArgument`."""
    rows = table.tolist()
    num_commands = len(rows)
    side_effects = [False] * num_commands
    cmd: list[int] = []
    sub: list[int] = []
    flag: list[int] = []
    extra: list[tuple[int, int]] = []
    props: list[int] | None = None
    minus_one = cache.setdefault("minus_one", {})
    num_indexes = len(indexes)
    for c, row in enumerate(rows):
        t = row[0]
        if not 0 <= t < _NUM_TYPES:
            raise _BadArgument()
        for pos, how in _PLANS_BY_TYPE[t]:
            if how.__class__ is not int:
                if how == "copy-rows-dest":
                    k = row[3]
                    if not 0 <= k < num_indexes:
                        raise _BadArgument()
                    arr = indexes[k]
                    entry = minus_one.get(id(arr))
                    if entry is None or entry[0] is not arr:
                        entry = minus_one[id(arr)] = (arr, bool((arr == -1).any()))
                    how = _RW if entry[1] else _W
                else:
                    if props is None:
                        props = cache.get("all_list")
                        if props is None:
                            props = cache["all_list"] = properties_array(nnet).tolist()
                    comp = row[1]
                    if not 0 <= comp < len(props):
                        raise _BadArgument()
                    p = props[comp]
                    if how == "propagate-output":
                        how = _RW if p & _P_PROPAGATE_ADDS else _W
                    else:   # backprop-in-deriv
                        how = _RW if p & _P_BACKPROP_ADDS else _W
                        if t == _T_BACKPROP and p & _P_UPDATABLE:
                            side_effects[c] = True
            s = row[pos + 1]
            if s != 0:
                cmd.append(c)
                sub.append(s)
                flag.append(how)
        multi_pos = _MULTI_POS_BY_TYPE[t]
        if multi_pos >= 0:
            extra.append((c, row[multi_pos + 1]))
    if extra:
        subs_of = cache.setdefault("multi_subs", {})
        for c, k in extra:
            if not 0 <= k < len(indexes_multi):
                raise _BadArgument()
            arr = indexes_multi[k]
            entry = subs_of.get(id(arr))
            if entry is None or entry[0] is not arr:
                u = unique_ints(arr[:, 0])
                entry = subs_of[id(arr)] = (arr, u[u != -1].astype(np.int64))
            f = _MULTI_FLAG_BY_TYPE[rows[c][0]]
            for s in entry[1].tolist():
                cmd.append(c)
                sub.append(s)
                flag.append(f)
    for s in sub:
        if not 0 <= s < num_submatrices:
            raise _BadArgument()
    i64 = np.int64
    return (np.array(cmd, dtype=i64), np.array(sub, dtype=i64), np.array(flag, dtype=i64),
            np.array(side_effects, dtype=bool))


def _submatrix_access_records(nnet: Any, computation: NnetComputation,
                              table: np.ndarray | None = None
                              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`access_records_from_table` for a computation; where an
    argument is bad, the command-by-command loop names the first bad
    command."""
    if table is None:
        table = computation.command_table()
    try:
        return access_records_from_table(nnet, table, computation.indexes,
                                         computation.indexes_multi,
                                         len(computation.submatrices))
    except _BadArgument:
        pass
    side = [False] * len(computation.commands)
    rec = _submatrix_access_records_loop(nnet, computation, side)
    cmd = np.array(rec.cmd, dtype=np.int64)
    sub = np.array(rec.sub, dtype=np.int64)
    bad = (sub < 0) | (sub >= len(computation.submatrices))
    if bad.any():
        # The first bad record in command order, as the loop found them.
        i = int(np.flatnonzero(bad)[0])
        raise command_error(computation, nnet, int(cmd[i]), f"submatrix index {sub[i]} out of range")
    raise ComputationCheckError("bad command argument (not located)")


@dataclass(slots=True)
class _AccessArrays:
    """Merged accesses as arrays: (command, item, flag) sorted by command, item."""

    cmd: np.ndarray
    item: np.ndarray
    flag: np.ndarray


class CommandAttributesList(Sequence):
    """The :class:`CommandAttributes` of every command, built on first use.

    Holds the merged access arrays; ``attributes[c]`` makes (and caches) the
    record of command c.  Passes ask about a few commands, so building all
    of them (six lists per command) up front was most of the analysis time.
    Compares equal to a list of the same records.
    """

    __slots__ = ("_num", "_arrays", "_bounds", "_side_effects", "_cache")

    def __init__(self, num_commands: int, arrays: Sequence[_AccessArrays],
                 side_effects: np.ndarray) -> None:
        self._num = num_commands
        # For variables, submatrices and matrices: (items read, bounds per
        # command, items written, bounds per command).
        self._arrays: list[tuple[np.ndarray, np.ndarray]] = []
        probe = np.arange(num_commands + 1)
        for a in arrays:
            for bit in (_R, _W):
                sel = (a.flag & bit) != 0
                self._arrays.append((a.item[sel], np.searchsorted(a.cmd[sel], probe)))
        self._side_effects = side_effects
        self._cache: list[CommandAttributes | None] = [None] * num_commands

    def __len__(self) -> int:
        return self._num

    def _make(self, c: int) -> CommandAttributes:
        lists = [items[b[c]:b[c + 1]].tolist() for items, b in self._arrays]
        return CommandAttributes(*lists, has_side_effects=bool(self._side_effects[c]))

    def __getitem__(self, c):  # type: ignore[override]
        if isinstance(c, slice):
            return [self[i] for i in range(*c.indices(self._num))]
        if c < 0:
            c += self._num
        if not 0 <= c < self._num:
            raise IndexError("command index out of range")
        ans = self._cache[c]
        if ans is None:
            ans = self._cache[c] = self._make(c)
        return ans

    def __iter__(self):
        for c in range(self._num):
            yield self[c]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, tuple, CommandAttributesList)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"CommandAttributesList(len={self._num})"


def _command_access_arrays(nnet: Any, computation: NnetComputation,
                           variables: ComputationVariables, table: np.ndarray | None = None
                           ) -> tuple[_AccessArrays, _AccessArrays, _AccessArrays, np.ndarray]:
    """Merged (command, item, flag) arrays for variables, submatrices and
    matrices, and the side-effect flags of the commands."""
    cmd, sub, flag, side_effects = _submatrix_access_records(nnet, computation, table)
    num_submatrices = len(computation.submatrices)
    v = variables
    # Variables: expand every record to the variables of its submatrix.
    counts = v.variables_offsets[sub + 1] - v.variables_offsets[sub]
    total = int(counts.sum())
    first = np.repeat(v.variables_offsets[sub] - (np.cumsum(counts) - counts), counts)
    var_items = v.variables_flat[first + np.arange(total, dtype=np.int64)]
    var = _AccessArrays(*_merge_records(np.repeat(cmd, counts), var_items,
                                        np.repeat(flag, counts), v.num_variables))
    subm = _AccessArrays(*_merge_records(cmd, sub, flag, num_submatrices))
    # Matrices: a write to only part of a matrix is also a read of it.
    partial_write = (flag == _W) & ~v.submatrix_is_whole_matrix[sub]
    mflag = np.where(partial_write, _RW, flag)
    mat = _AccessArrays(*_merge_records(cmd, v.submatrix_to_matrix[sub], mflag,
                                        len(computation.matrices)))
    return var, subm, mat, side_effects


_T_ALLOC_MATRIX = int(CommandType.ALLOC_MATRIX)
_T_SWAP_MATRIX = int(CommandType.SWAP_MATRIX)
_T_DEALLOC_MATRIX = int(CommandType.DEALLOC_MATRIX)
_T_ACCEPT_INPUT = int(CommandType.ACCEPT_INPUT)
_T_PROVIDE_OUTPUT = int(CommandType.PROVIDE_OUTPUT)
_LIFETIME_TYPES = type_mask([CommandType.ALLOC_MATRIX, CommandType.SWAP_MATRIX,
                             CommandType.DEALLOC_MATRIX, CommandType.ACCEPT_INPUT,
                             CommandType.PROVIDE_OUTPUT])


def _matrix_lifetimes(table: np.ndarray, variables: ComputationVariables, num_matrices: int
                      ) -> tuple[list[int], list[int], list[bool], list[bool]] | None:
    """Per matrix: the allocating and deallocating commands (-1 if none) and
    whether it is an input / output, from the command table; None if some
    command breaks the rules (not a whole matrix, allocated or freed twice)."""
    fp = fast_paths.current()
    # (Once this process has loaded the compiled loop, it beats both others
    # from analysis_jit_loaded_from on; the Python loop costs about 0.1 us
    # per command, the array version ~30 us.)
    if fp.analysis_loop_loaded(_lifetimes_loop, len(table)):
        return _matrix_lifetimes_jit(table, variables, num_matrices)
    if len(table) < 3 * fp.analysis_python_below:
        return _matrix_lifetimes_python(table, variables, num_matrices)
    if fp.analysis_jit and len(variables.submatrix_to_matrix) >= fp.analysis_jit_from:
        return _matrix_lifetimes_jit(table, variables, num_matrices)
    rows = rows_with_type(table[:, 0], _LIFETIME_TYPES)
    types, arg1, arg2 = table[rows, 0], table[rows, 1], table[rows, 2]
    whole = variables.submatrix_is_whole_matrix
    swap = types == _T_SWAP_MATRIX
    subs = np.concatenate([arg1, arg2[swap]])
    if len(subs) and ((subs <= 0) | (subs >= len(whole))).any():
        return None
    if not whole[subs].all():
        return None
    to_matrix = variables.submatrix_to_matrix
    m1 = to_matrix[arg1]
    alloc = np.full(num_matrices, -1, dtype=np.int64)
    dealloc = np.full(num_matrices, -1, dtype=np.int64)
    # Allocation: AllocMatrix, SwapMatrix (first argument) and the first
    # AcceptInput of a matrix; an AllocMatrix or SwapMatrix must be the
    # first of these for its matrix.
    is_accept = types == _T_ACCEPT_INPUT
    creates = (types == _T_ALLOC_MATRIX) | swap | is_accept
    cm, cc, c_accept = m1[creates], rows[creates], is_accept[creates]
    rank = _occurrence_rank(cm)
    if (~c_accept & (rank > 0)).any():
        return None
    alloc[cm[rank == 0]] = cc[rank == 0]
    # Deallocation: DeallocMatrix, SwapMatrix (second argument); at most one.
    frees = types == _T_DEALLOC_MATRIX
    dm = np.concatenate([m1[frees], to_matrix[arg2[swap]]])
    if len(unique_ints(dm)) != len(dm):
        return None
    dealloc[dm] = np.concatenate([rows[frees], rows[swap]])
    is_input = np.zeros(num_matrices, dtype=bool)
    is_input[m1[is_accept]] = True
    is_output = np.zeros(num_matrices, dtype=bool)
    is_output[m1[types == _T_PROVIDE_OUTPUT]] = True
    return alloc.tolist(), dealloc.tolist(), is_input.tolist(), is_output.tolist()


def _matrix_lifetimes_python(table: np.ndarray, variables: ComputationVariables,
                             num_matrices: int
                             ) -> tuple[list[int], list[int], list[bool], list[bool]] | None:
    """:func:`_matrix_lifetimes` by :func:`_lifetimes_loop` interpreted, on
    Python lists (small tables)."""
    types, args1, args2 = (table[:, i].tolist() for i in range(3))
    alloc, dealloc = [-1] * num_matrices, [-1] * num_matrices
    is_input, is_output = [False] * num_matrices, [False] * num_matrices
    if not _lifetimes_loop.py_func(types, args1, args2, _LIFETIME_TYPES_LIST,
                                   variables.submatrix_is_whole_matrix.tolist(),
                                   variables.submatrix_to_matrix.tolist(),
                                   alloc, dealloc, is_input, is_output, [False] * num_matrices):
        return None
    return alloc, dealloc, is_input, is_output


_LIFETIME_TYPES_LIST = _LIFETIME_TYPES.tolist()


def _matrix_lifetimes_jit(table: np.ndarray, variables: ComputationVariables,
                          num_matrices: int
                          ) -> tuple[list[int], list[int], list[bool], list[bool]] | None:
    """:func:`_matrix_lifetimes` by :func:`_lifetimes_loop` compiled."""
    alloc = np.full(num_matrices, -1, dtype=np.int64)
    dealloc = np.full(num_matrices, -1, dtype=np.int64)
    is_input = np.zeros(num_matrices, dtype=np.bool_)
    is_output = np.zeros(num_matrices, dtype=np.bool_)
    if not _lifetimes_loop(*(np.ascontiguousarray(table[:, i], dtype=np.int64)
                             for i in range(3)), _LIFETIME_TYPES,
                           np.ascontiguousarray(variables.submatrix_is_whole_matrix,
                                                dtype=np.bool_),
                           np.ascontiguousarray(variables.submatrix_to_matrix, dtype=np.int64),
                           alloc, dealloc, is_input, is_output,
                           np.zeros(num_matrices, dtype=np.bool_)):
        return None
    return alloc.tolist(), dealloc.tolist(), is_input.tolist(), is_output.tolist()


@lazy_njit(cache=True, nogil=True)
def _lifetimes_loop(types, args1, args2, lifetime_type, whole, to_matrix,
                    alloc, dealloc, is_input, is_output, created):
    """The allocating and deallocating command (alloc, dealloc: -1 where
    none) and the input and output flags of every matrix, filled in from
    the commands' types and first two arguments; False (the outputs then
    partly filled) if a command breaks the rules.  Compiled for
    :func:`_matrix_lifetimes_jit`, interpreted on lists for
    :func:`_matrix_lifetimes_python`."""
    num_subs = len(whole)
    num_types = len(lifetime_type)
    for c in range(len(types)):
        t = types[c]
        if t < 0 or t >= num_types or not lifetime_type[t]:
            continue
        a1 = args1[c]
        if not 0 < a1 < num_subs or not whole[a1]:
            return False
        m = to_matrix[a1]
        if t == _T_SWAP_MATRIX:
            a2 = args2[c]
            if not 0 < a2 < num_subs or not whole[a2]:
                return False
            m2 = to_matrix[a2]
            if dealloc[m2] != -1:
                return False
            dealloc[m2] = c
        if t == _T_ALLOC_MATRIX or t == _T_SWAP_MATRIX or t == _T_ACCEPT_INPUT:
            if created[m]:
                if t != _T_ACCEPT_INPUT:
                    return False
            else:
                created[m] = True
                alloc[m] = c
            if t == _T_ACCEPT_INPUT:
                is_input[m] = True
        elif t == _T_DEALLOC_MATRIX:
            if dealloc[m] != -1:
                return False
            dealloc[m] = c
        elif t == _T_PROVIDE_OUTPUT:
            is_output[m] = True
    return True


def _occurrence_rank(keys: np.ndarray) -> np.ndarray:
    """For each element, how many earlier elements have the same key."""
    if len(keys) == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    starts = np.ones(len(keys), dtype=bool)
    starts[1:] = sorted_keys[1:] != sorted_keys[:-1]
    group_start = np.maximum.accumulate(np.where(starts, np.arange(len(keys)), 0))
    rank = np.empty(len(keys), dtype=np.int64)
    rank[order] = np.arange(len(keys)) - group_start
    return rank


def _matrix_lifetimes_loop(nnet: Any, computation: NnetComputation,
                           variables: ComputationVariables, table: np.ndarray,
                           ans: list[MatrixAccesses]) -> None:
    """What :func:`_matrix_lifetimes` computes, command by command, raising
    at the first command that breaks the rules."""
    subs = computation.submatrices
    whole = variables.submatrix_is_whole_matrix
    num_subs = len(whole)

    def whole_matrix(c: int, s: int) -> int:
        if not 0 < s < num_subs or not whole[s]:
            raise command_error(computation, nnet, c, "command does not operate on a whole matrix")
        return subs[s].matrix_index

    def destroyed_by(c: int, m: int) -> None:
        if ans[m].deallocate_command != -1:
            raise command_error(computation, nnet, c, f"matrix m{m} is destroyed twice "
                                f"(first by c{ans[m].deallocate_command})")
        ans[m].deallocate_command = c

    T = CommandType
    interesting = rows_with_type(table[:, 0], _LIFETIME_TYPES)
    rows = table[interesting]
    for c, t, arg1, arg2 in zip(interesting.tolist(), rows[:, 0].tolist(), rows[:, 1].tolist(),
                                rows[:, 2].tolist()):
        if t == T.ALLOC_MATRIX or t == T.SWAP_MATRIX:
            m = whole_matrix(c, arg1)
            if ans[m].allocate_command != -1:
                raise command_error(computation, nnet, c, f"matrix m{m} is initialized twice "
                                    f"(first by c{ans[m].allocate_command})")
            ans[m].allocate_command = c
            if t == T.SWAP_MATRIX:
                destroyed_by(c, whole_matrix(c, arg2))
        elif t == T.DEALLOC_MATRIX:
            destroyed_by(c, whole_matrix(c, arg1))
        elif t == T.ACCEPT_INPUT:
            m = whole_matrix(c, arg1)
            ans[m].is_input = True
            # Accepting the same matrix again just re-allocates it; the first
            # acceptance counts as the allocation.
            if ans[m].allocate_command == -1:
                ans[m].allocate_command = c
        else:  # PROVIDE_OUTPUT
            m = whole_matrix(c, arg1)
            ans[m].is_output = True


def compute_command_attributes(nnet: Any, computation: NnetComputation,
                               variables: ComputationVariables,
                               _arrays: dict[str, _AccessArrays] | None = None
                               ) -> CommandAttributesList:
    """Kaldi's ComputeCommandAttributes: one CommandAttributes per command
    (a lazily built sequence; see :class:`CommandAttributesList`).

    ``nnet`` supplies component properties (Propagate may add to its output,
    Backprop may add to the input derivative, updatable Backprop has side
    effects).  ``_arrays``, if given, receives the merged access arrays the
    Analyzer reuses.
    """
    var, subm, mat, side_effects = _command_access_arrays(nnet, computation, variables)
    if _arrays is not None:
        _arrays.update(variables=var, matrices=mat)
    return CommandAttributesList(len(computation.commands), (var, subm, mat), side_effects)


# ---------------------------------------------------------------------------
# Per-variable and per-matrix accesses
# ---------------------------------------------------------------------------

class VariableAccessTable:
    """Accesses of every variable, sorted by command, one per command.

    Stored as arrays in compressed-row form (``offsets``, ``commands``,
    ``types``); ``table[v]`` gives variable v's accesses as a list of
    :class:`Access` (built on first use and cached), so it reads like
    Kaldi's ``std::vector<std::vector<Access>>``.
    """

    def __init__(self, num_variables: int, var: np.ndarray, cmd: np.ndarray,
                 flag: np.ndarray) -> None:
        self._cache: list[list[Access] | None] = [None] * num_variables
        self._commands_list: list[int] | None = None
        self._types_list: list[int] | None = None
        self._offsets_list: list[int] | None = None
        if 0 < len(cmd) < _MERGE_PYTHON_BELOW:
            self._init_lists(num_variables, var.tolist(), cmd.tolist(), flag.tolist())
            return
        # Sorted by variable then command, several accesses of one command
        # to one variable merged (the input may be in any order).
        var_sorted, self.commands, flag = _merge_records(var, cmd, flag,
                                                         int(cmd.max()) + 1 if len(cmd) else 1)
        self.types = flag - 1  # AccessType values
        self.offsets = np.searchsorted(var_sorted, np.arange(num_variables + 1))

    def _init_lists(self, num_variables: int, var: list[int], cmd: list[int],
                    flag: list[int]) -> None:
        """The same arrays by merging in a dict (few records)."""
        commands, types, offsets = _merge_records_in_dict(var, cmd, flag, num_variables)
        i64 = np.int64
        self.commands = np.array(commands, dtype=i64)
        self.types = np.array(types, dtype=i64)
        self.offsets = np.array(offsets, dtype=i64)
        self._commands_list, self._types_list, self._offsets_list = commands, types, offsets

    def __len__(self) -> int:
        return len(self._cache)

    def __getitem__(self, v: int) -> list[Access]:
        acc = self._cache[v]
        if acc is None:
            if self._commands_list is None:
                self._commands_list = self.commands.tolist()
                self._types_list = self.types.tolist()
                self._offsets_list = self.offsets.tolist()
            lo, hi = self._offsets_list[v], self._offsets_list[v + 1]
            acc = list(map(_TUPLE_NEW, repeat(Access), zip(
                self._commands_list[lo:hi],
                map(_ACCESS_TYPES.__getitem__, self._types_list[lo:hi]))))
            self._cache[v] = acc
        return acc

    def __iter__(self):
        for v in range(len(self)):
            yield self[v]

    def num_accesses(self) -> np.ndarray:
        return np.diff(self.offsets)


def compute_variable_accesses(variables: ComputationVariables,
                              command_attributes: Sequence[CommandAttributes]
                              ) -> VariableAccessTable:
    """Kaldi's ComputeVariableAccesses, from the command attributes."""
    cmds, vars_, flags = [], [], []
    for c, attr in enumerate(command_attributes):
        r, w = attr.variables_read, attr.variables_written
        if not r and not w:
            continue
        both = r + w
        cmds.append(np.full(len(both), c, dtype=np.int64))
        vars_.append(np.array(both, dtype=np.int64))
        flags.append(np.concatenate([np.full(len(r), _R), np.full(len(w), _W)]).astype(np.int64))
    if not cmds:
        e = np.zeros(0, dtype=np.int64)
        return VariableAccessTable(variables.num_variables, e, e, e)
    cmd, var, flag = _merge_records(np.concatenate(cmds), np.concatenate(vars_),
                                    np.concatenate(flags), variables.num_variables)
    return VariableAccessTable(variables.num_variables, var, cmd, flag)


def compute_matrix_accesses(nnet: Any, computation: NnetComputation,
                            variables: ComputationVariables,
                            command_attributes: Sequence[CommandAttributes],
                            _matrix_arrays: _AccessArrays | None = None,
                            _table: np.ndarray | None = None) -> Sequence[MatrixAccesses]:
    """Kaldi's ComputeMatrixAccesses: accesses, allocation, deallocation and
    input/output status of every matrix (index 0 included, unused)."""
    num_matrices = len(computation.matrices)
    if _matrix_arrays is None:
        cmds, mats, flags = [], [], []
        for c, attr in enumerate(command_attributes):
            for m in attr.matrices_read:
                cmds.append(c), mats.append(m), flags.append(_R)
            for m in attr.matrices_written:
                cmds.append(c), mats.append(m), flags.append(_W)
        _matrix_arrays = _AccessArrays(*_merge_records(
            np.array(cmds, dtype=np.int64), np.array(mats, dtype=np.int64),
            np.array(flags, dtype=np.int64), num_matrices))
    a = _matrix_arrays
    table = _table if _table is not None else computation.command_table()
    if 0 < len(a.cmd) < _MERGE_PYTHON_BELOW:
        lifetimes = _matrix_lifetimes(table, variables, num_matrices)
        if lifetimes is not None:
            return _matrix_accesses_lists(a, num_matrices, lifetimes)
    # Sorted by matrix, then command, one access per command (merged).
    mats, cmds, flags = _merge_records(a.item, a.cmd, a.flag,
                                       int(a.cmd.max()) + 1 if len(a.cmd) else 1)
    types = flags - 1
    bounds = np.searchsorted(mats, np.arange(num_matrices + 1))
    lifetimes = _matrix_lifetimes(table, variables, num_matrices)
    if lifetimes is None:
        # Something is wrong: the loop finds the first bad command and says what.
        every = list(map(_TUPLE_NEW, repeat(Access), zip(
            cmds.tolist(), map(_ACCESS_TYPES.__getitem__, types.tolist()))))
        b = bounds.tolist()
        ans = [MatrixAccesses(accesses=every[lo:hi]) for lo, hi in zip(b[:-1], b[1:])]
        _matrix_lifetimes_loop(nnet, computation, variables, table, ans)
        return ans
    return MatrixAccessesList(cmds, types, bounds, *lifetimes)


def _matrix_accesses_lists(a: _AccessArrays, num_matrices: int,
                           lifetimes: tuple[list[int], list[int], list[bool], list[bool]]
                           ) -> "MatrixAccessesList":
    """compute_matrix_accesses' result for few records (merged in a dict)."""
    cmds, types, bounds = _merge_records_in_dict(a.item.tolist(), a.cmd.tolist(),
                                                 a.flag.tolist(), num_matrices)
    i64 = np.int64
    ans = MatrixAccessesList(np.array(cmds, dtype=i64), np.array(types, dtype=i64),
                             np.array(bounds, dtype=i64), *lifetimes)
    ans._lists = (cmds, types, bounds)
    return ans


class MatrixAccessesList(Sequence):
    """The :class:`MatrixAccesses` of every matrix, each made on first use
    (variable merging asks about a few matrices per round).  Compares equal
    to a list of the same records.

    The same information as arrays, for passes that look at every matrix:
    ``access_commands`` and ``access_types`` (AccessType values) of all
    accesses sorted by matrix then command, matrix m's being
    ``bounds[m]:bounds[m+1]``; ``allocate``, ``deallocate``, ``is_input``,
    ``is_output``: lists indexed by matrix.
    """

    __slots__ = ("access_commands", "access_types", "bounds", "allocate", "deallocate",
                 "is_input", "is_output", "_lists", "_cache")

    def __init__(self, commands: np.ndarray, types: np.ndarray, bounds: np.ndarray,
                 alloc: list[int], dealloc: list[int], is_input: list[bool],
                 is_output: list[bool]) -> None:
        self.access_commands, self.access_types, self.bounds = commands, types, bounds
        self.allocate, self.deallocate = alloc, dealloc
        self.is_input, self.is_output = is_input, is_output
        self._lists: tuple[list[int], list[int], list[int]] | None = None
        self._cache: list[MatrixAccesses | None] = [None] * (len(bounds) - 1)

    def __len__(self) -> int:
        return len(self._cache)

    def __getitem__(self, m):  # type: ignore[override]
        if isinstance(m, slice):
            return [self[i] for i in range(*m.indices(len(self)))]
        if m < 0:
            m += len(self._cache)
        ans = self._cache[m]
        if ans is None:
            lists = self._lists
            if lists is None:
                lists = self._lists = (self.access_commands.tolist(), self.access_types.tolist(),
                                       self.bounds.tolist())
            cmds, types, bounds = lists
            lo, hi = bounds[m], bounds[m + 1]
            ans = self._cache[m] = MatrixAccesses(
                self.allocate[m], self.deallocate[m],
                list(map(_TUPLE_NEW, repeat(Access), zip(
                    cmds[lo:hi], map(_ACCESS_TYPES.__getitem__, types[lo:hi])))),
                self.is_input[m], self.is_output[m])
        return ans

    def __iter__(self):
        for m in range(len(self._cache)):
            yield self[m]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, tuple, MatrixAccessesList)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"MatrixAccessesList(len={len(self)})"
