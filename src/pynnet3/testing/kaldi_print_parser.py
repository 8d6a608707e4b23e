"""Read Kaldi's printed NnetComputation (``NnetComputation::Print``) back.

Kaldi's reference outputs include computations it compiled and optimised,
printed with debug info.  Parsing them gives real Kaldi computations to run
through :class:`pynnet3.compute.NnetComputer` before (and independently of)
pynnet3's own compiler.

What the printed form lacks, and how it is recovered:

* submatrix numbering: submatrices are identified by their text
  (``m3(6:25, 0:219)``); each distinct one gets an index.  Rows named in
  indexes-multi (``m5(3,0:9)``, absolute row 3) refer to a submatrix
  spanning all rows of m5 with those columns.
* memo indexes (Propagate arg5 / Backprop arg7): Kaldi's compiler gives a
  memo to each Propagate of a component with the USES_MEMO property whose
  step has a derivative, and the same memo to that step's Backprop.  Each
  such Backprop is paired with the latest unpaired Propagate of the same
  component that agrees with it on precomputed indexes and on the
  submatrices both commands name.
* the store-stats flag (Propagate arg6): ``store_component_stats`` of the
  request and the component's STORES_STATS property, as Kaldi's compiler sets it.
* kBackprop vs kBackpropNoModelUpdate: printed differently only when the
  computation needs a model derivative; otherwise kBackprop is assumed (what
  Kaldi's compiler emits).
* precomputed indexes: recomputed with ``Component.precompute_indexes`` from
  the Indexes of the command's input and output rows, read from the matrix
  debug info (``m2 == value: node[(n,t...)]``).
* stride types are not printed (they do not matter to pynnet3's backends).

Kaldi cuts lines longer than 200 characters in the middle (`` ... ``); a
computation with a cut command, or with cut debug info that precomputed
indexes need, raises :class:`UnparseableComputation` with the reason.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ..errors import FormatError
from ..nnet.components.base import Prop
from ..nnet.index import Index
from ..compile.computation import (Command, CommandType, CompressedMatrixType, MatrixDebugInfo,
                          MatrixInfo, NnetComputation, PrecomputedIndexesInfo, SubMatrixInfo)
from ..compile.precomputed_indexes import compute_precomputed_indexes

if TYPE_CHECKING:
    from ..nnet.nnet import Nnet

T = CommandType


class UnparseableComputation(FormatError):
    """The printed computation cannot be turned back into a computation
    (typically because Kaldi's printer truncated something needed)."""


_SUB = r"\[\]|m\d+(?:\(\d+:\d+, \d+:\d+\))?"
_NUM = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|inf|nan)"
_PRE = r"NULL|precomputed_indexes\[\d+\]"
_RE = {
    "alloc": re.compile(rf"^({_SUB}) = undefined\((\d+),(\d+)\)$"),
    "dealloc": re.compile(rf"^({_SUB}) = \[\]$"),
    "accept": re.compile(rf"^({_SUB}) = user input \[for node: '(.*)'\]$"),
    "provide": re.compile(rf"^output ({_SUB}) to user \[for node: '(.*)'\]$"),
    "swap": re.compile(rf"^({_SUB})\.swap\(({_SUB})\) \[dim = (\d+) x (\d+)\]$"),
    "set": re.compile(rf"^({_SUB})\.set\(({_NUM})\) \[dim = (\d+) x (\d+)\];$"),
    "propagate": re.compile(rf"^(.+)\.Propagate\(({_PRE}), ({_SUB}), &({_SUB})\)$"),
    "backprop": re.compile(rf"^(.+)\.Backprop\(({_PRE}), ({_SUB}), ({_SUB}), ({_SUB}), "
                           rf"(NULL|\[component-pointer\]), (NULL|&(?:{_SUB}))\)$"),
    "copy_add": re.compile(rf"^({_SUB}) (\+?=) (?:({_NUM}) \* )?({_SUB})$"),
    "rows": re.compile(rf"^({_SUB})\.(CopyRows|AddRows)\(({_NUM}), ({_SUB})\[(.*)\]\)$"),
    "multi": re.compile(rf"^({_SUB})\.(AddRowsMulti|AddToRowsMulti|CopyRowsMulti|CopyToRowsMulti)"
                        rf"\(({_NUM}), \[(.*)\]\)$"),
    "ranges": re.compile(rf"^({_SUB})\.AddRowRanges\(({_NUM}), ({_SUB}), \[(.*)\]\)$"),
    "compress": re.compile(rf"^CompressMatrix\(({_SUB}), ({_NUM}), (int8|uint8|int16|uint16), "
                           rf"(true|false)\)$"),
    "decompress": re.compile(rf"^DecompressMatrix\(({_SUB})\)$"),
    "goto": re.compile(r"^goto c(\d+)$"),
}
_NO_OPS = {
    "[no-op]": T.NO_OPERATION,
    "[no-op-permanent]": T.NO_OPERATION_PERMANENT,
    "# computation segment separator [e.g., begin backward commands]": T.NO_OPERATION_MARKER,
    "[label for goto statement]": T.NO_OPERATION_LABEL,
}
_MULTI = {"AddRowsMulti": T.ADD_ROWS_MULTI, "AddToRowsMulti": T.ADD_TO_ROWS_MULTI,
          "CopyRowsMulti": T.COPY_ROWS_MULTI, "CopyToRowsMulti": T.COPY_TO_ROWS_MULTI}
_SUB_PARTS = re.compile(r"^m(\d+)(?:\((\d+):(\d+), (\d+):(\d+)\))?$")
_MULTI_ITEM = re.compile(r"^m(\d+)\((\d+),(?::|(\d+):(\d+))\)$")
_INDEX_ITEM = re.compile(r"\((-?\d+),(-?\d+)(?::(-?\d+))?(?:,(-?\d+))?\)")
_MATRIX_ITEM = re.compile(r"m(\d+)\((\d+), (\d+)\)")
_DEBUG_LINE = re.compile(r"^m(\d+) == (value|deriv): (.*)$")
_COMMAND_LINE = re.compile(r"^c(\d+): (.*)$")


def parse_integer_vector(text: str) -> list[int]:
    """Inverse of Kaldi's PrintIntegerVector: ``[0:3, 7x3, -1, 5]``."""
    body = text.strip()
    if not (body.startswith("[") and body.endswith("]")):
        raise FormatError(f"expected an integer vector in brackets, got {text[:60]!r}")
    body = body[1:-1].strip()
    if not body:
        return []
    out: list[int] = []
    for tok in body.split(","):
        tok = tok.strip()
        if "x" in tok:
            value, count = tok.split("x")
            out.extend([int(value)] * int(count))
            continue
        m = re.match(r"^(-?\d+):(-?\d+)$", tok)
        if m:
            out.extend(range(int(m.group(1)), int(m.group(2)) + 1))
        else:
            out.append(int(tok))
    return out


def parse_indexes(text: str) -> list[Index]:
    """Inverse of Kaldi's PrintIndexes body: ``(1,2:11), (2,5), (0,3,1)``."""
    out: list[Index] = []
    for m in _INDEX_ITEM.finditer(text):
        n, t1 = int(m.group(1)), int(m.group(2))
        t2 = int(m.group(3)) if m.group(3) is not None else t1
        x = int(m.group(4)) if m.group(4) is not None else 0
        out.extend(Index(n, t, x) for t in range(t1, t2 + 1))
    return out


def _parse_cindexes(text: str, nnet: "Nnet") -> list[tuple[int, Index]] | None:
    """``node[(..)]node2[(..)]`` -> cindexes; None if Kaldi truncated any part."""
    out: list[tuple[int, Index]] = []
    pos = 0
    text = text.strip()
    if text == "[ ]":
        return out
    while pos < len(text):
        open_ = text.find("[", pos)
        close = text.find("]", open_)
        if open_ < 0 or close < 0:
            raise FormatError(f"bad cindex list {text[:80]!r}")
        name, body = text[pos:open_], text[open_ + 1:close]
        if " ... " in body:
            return None
        node = nnet.get_node_index(name)
        if node < 0:
            raise FormatError(f"debug info names node {name!r}, which the network lacks")
        out.extend((node, i) for i in parse_indexes(body))
        pos = close + 1
    return out


def _split_args(text: str) -> list[str]:
    """Split on the commas that are not inside () or []."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


class _Parser:
    def __init__(self, nnet: "Nnet", where: str):
        self.nnet = nnet
        self.where = where
        self.comp = NnetComputation()
        self.comp.matrices = [MatrixInfo(0, 0)]
        self.comp.submatrices = [SubMatrixInfo(0, 0, 0, 0, 0)]
        self.sub_index: dict[tuple[int, int, int, int, int], int] = {}
        self.truncated_debug: set[int] = set()

    def error(self, message: str) -> FormatError:
        return FormatError(message, self.where)

    # -- submatrices -------------------------------------------------------
    def submatrix(self, m: int, row_offset: int, num_rows: int, col_offset: int,
                  num_cols: int) -> int:
        key = (m, row_offset, num_rows, col_offset, num_cols)
        s = self.sub_index.get(key)
        if s is None:
            if not 0 < m < len(self.comp.matrices):
                raise self.error(f"submatrix of unknown matrix m{m}")
            info = self.comp.matrices[m]
            if (row_offset < 0 or num_rows <= 0 or row_offset + num_rows > info.num_rows
                    or col_offset < 0 or num_cols <= 0 or col_offset + num_cols > info.num_cols):
                raise self.error(f"submatrix m{m}({row_offset}:{row_offset + num_rows - 1}, "
                                 f"{col_offset}:{col_offset + num_cols - 1}) is out of range")
            s = len(self.comp.submatrices)
            self.comp.submatrices.append(SubMatrixInfo(*key))
            self.sub_index[key] = s
        return s

    def sub(self, text: str) -> int:
        if text == "[]":
            return 0
        m = _SUB_PARTS.match(text)
        if m is None:
            raise self.error(f"bad submatrix {text!r}")
        mi = int(m.group(1))
        if mi >= len(self.comp.matrices):
            raise self.error(f"unknown matrix m{mi}")
        if m.group(2) is None:
            info = self.comp.matrices[mi]
            return self.submatrix(mi, 0, info.num_rows, 0, info.num_cols)
        r1, r2, c1, c2 = (int(m.group(k)) for k in range(2, 6))
        return self.submatrix(mi, r1, r2 - r1 + 1, c1, c2 - c1 + 1)

    # -- preamble -----------------------------------------------------------
    def matrices_line(self, line: str) -> None:
        items = _MATRIX_ITEM.findall(line)
        for k, (idx, rows, cols) in enumerate(items, start=1):
            if int(idx) != k:
                raise self.error(f"matrices are not numbered 1, 2, ...: found m{idx}")
            self.comp.matrices.append(MatrixInfo(int(rows), int(cols)))
        for m, info in enumerate(self.comp.matrices[1:], start=1):
            self.submatrix(m, 0, info.num_rows, 0, info.num_cols)

    def debug_line(self, m: int, is_deriv: bool, text: str) -> None:
        comp = self.comp
        if not comp.matrix_debug_info:
            comp.matrix_debug_info = [MatrixDebugInfo() for _ in comp.matrices]
        cindexes = _parse_cindexes(text, self.nnet)
        if cindexes is None:
            self.truncated_debug.add(m)
            cindexes = []
        elif len(cindexes) != comp.matrices[m].num_rows:
            raise self.error(f"debug info of m{m} lists {len(cindexes)} cindexes for "
                             f"{comp.matrices[m].num_rows} rows")
        comp.matrix_debug_info[m] = MatrixDebugInfo(is_deriv, cindexes)

    def row_indexes(self, s: int, what: str) -> list[Index]:
        """The Indexes of the rows of submatrix s, from the debug info."""
        if s == 0:
            return []
        info = self.comp.submatrices[s]
        m = info.matrix_index
        if not self.comp.matrix_debug_info:
            raise UnparseableComputation(f"{what} needs matrix debug info, which was not printed",
                                         self.where)
        if m in self.truncated_debug:
            raise UnparseableComputation(f"{what} needs the indexes of m{m}, whose debug info "
                                         f"Kaldi's printer truncated", self.where)
        cindexes = self.comp.matrix_debug_info[m].cindexes
        return [c[1] for c in cindexes[info.row_offset:info.row_offset + info.num_rows]]

    # -- commands -------------------------------------------------------------
    def component(self, name: str) -> int:
        c = self.nnet.get_component_index(name)
        if c < 0:
            raise self.error(f"component {name!r} is not in the network")
        return c

    def node(self, name: str) -> int:
        n = self.nnet.get_node_index(name)
        if n < 0:
            raise self.error(f"node {name!r} is not in the network")
        return n

    @staticmethod
    def precomputed(text: str) -> int:
        return 0 if text == "NULL" else int(text[len("precomputed_indexes["):-1])

    def multi(self, body: str) -> int:
        pairs = []
        for item in _split_args(body):
            if item == "NULL":
                pairs.append((-1, -1))
                continue
            m = _MULTI_ITEM.match(item)
            if m is None:
                raise self.error(f"bad indexes-multi item {item!r}")
            mi, row = int(m.group(1)), int(m.group(2))
            if mi >= len(self.comp.matrices) or mi == 0:
                raise self.error(f"indexes-multi names unknown matrix m{mi}")
            info = self.comp.matrices[mi]
            if m.group(3) is None:
                c1, nc = 0, info.num_cols
            else:
                c1 = int(m.group(3))
                nc = int(m.group(4)) - c1 + 1
            pairs.append((self.submatrix(mi, 0, info.num_rows, c1, nc), row))
        return self.comp.add_indexes_multi(pairs)

    def command(self, text: str, need_model_derivative: bool) -> Command:
        noop = _NO_OPS.get(text)
        if noop is not None:
            return Command(noop)
        R = _RE
        if (m := R["alloc"].match(text)):
            return Command(T.ALLOC_MATRIX, arg1=self.sub(m.group(1)))
        if (m := R["dealloc"].match(text)):
            return Command(T.DEALLOC_MATRIX, arg1=self.sub(m.group(1)))
        if (m := R["accept"].match(text)):
            return Command(T.ACCEPT_INPUT, arg1=self.sub(m.group(1)), arg2=self.node(m.group(2)))
        if (m := R["provide"].match(text)):
            return Command(T.PROVIDE_OUTPUT, arg1=self.sub(m.group(1)), arg2=self.node(m.group(2)))
        if (m := R["swap"].match(text)):
            return Command(T.SWAP_MATRIX, arg1=self.sub(m.group(1)), arg2=self.sub(m.group(2)))
        if (m := R["set"].match(text)):
            return Command(T.SET_CONST, alpha=float(m.group(2)), arg1=self.sub(m.group(1)))
        if (m := R["propagate"].match(text)):
            return Command(T.PROPAGATE, arg1=self.component(m.group(1)),
                           arg2=self.precomputed(m.group(2)), arg3=self.sub(m.group(3)),
                           arg4=self.sub(m.group(4)), arg5=0, arg6=0)
        if (m := R["backprop"].match(text)):
            if m.group(6) == "[component-pointer]":
                if not need_model_derivative:
                    raise self.error("Backprop with [component-pointer] in a computation without "
                                     "model derivative")
                ctype = T.BACKPROP
            else:
                ctype = T.BACKPROP_NO_MODEL_UPDATE if need_model_derivative else T.BACKPROP
            in_deriv = 0 if m.group(7) == "NULL" else self.sub(m.group(7)[1:])
            return Command(ctype, arg1=self.component(m.group(1)),
                           arg2=self.precomputed(m.group(2)), arg3=self.sub(m.group(3)),
                           arg4=self.sub(m.group(4)), arg5=self.sub(m.group(5)),
                           arg6=in_deriv, arg7=0)
        if (m := R["rows"].match(text)):
            ctype = T.COPY_ROWS if m.group(2) == "CopyRows" else T.ADD_ROWS
            ix = self.comp.add_indexes(parse_integer_vector("[" + m.group(5) + "]"))
            return Command(ctype, alpha=float(m.group(3)), arg1=self.sub(m.group(1)),
                           arg2=self.sub(m.group(4)), arg3=ix)
        if (m := R["multi"].match(text)):
            return Command(_MULTI[m.group(2)], alpha=float(m.group(3)), arg1=self.sub(m.group(1)),
                           arg2=self.multi(m.group(4)))
        if (m := R["ranges"].match(text)):
            pairs = []
            for item in (m.group(4).split(",") if m.group(4) else []):
                if item == "null":
                    pairs.append((-1, -1))
                else:
                    a, b = item.split(":")
                    pairs.append((int(a), int(b) + 1))
            return Command(T.ADD_ROW_RANGES, alpha=float(m.group(2)), arg1=self.sub(m.group(1)),
                           arg2=self.sub(m.group(3)), arg3=self.comp.add_indexes_ranges(pairs))
        if (m := R["compress"].match(text)):
            kind = CompressedMatrixType[m.group(3).upper()]
            return Command(T.COMPRESS_MATRIX, alpha=float(m.group(2)), arg1=self.sub(m.group(1)),
                           arg2=int(kind), arg3=1 if m.group(4) == "true" else 0)
        if (m := R["decompress"].match(text)):
            return Command(T.DECOMPRESS_MATRIX, arg1=self.sub(m.group(1)))
        if (m := R["goto"].match(text)):
            return Command(T.GOTO_LABEL, arg1=int(m.group(1)))
        # Checked last: "m1 = m2" also matches the start of other forms.
        if (m := R["copy_add"].match(text)):
            ctype = T.MATRIX_COPY if m.group(2) == "=" else T.MATRIX_ADD
            alpha = float(m.group(3)) if m.group(3) is not None else 1.0
            return Command(ctype, alpha=alpha, arg1=self.sub(m.group(1)), arg2=self.sub(m.group(4)))
        raise self.error(f"unrecognised command {text[:120]!r}")


def _submatrices_agree(a: int, b: int) -> bool:
    return a == 0 or b == 0 or a == b


def _assign_memos(comp: NnetComputation, nnet: "Nnet") -> None:
    """Give paired Propagate/Backprop commands of memo-using components a memo."""
    commands = comp.commands
    unpaired: dict[int, list[int]] = {}
    next_memo = 1
    for i, c in enumerate(commands):
        if c.command_type not in (T.PROPAGATE, T.BACKPROP, T.BACKPROP_NO_MODEL_UPDATE):
            continue
        if not nnet.get_component(c.arg1).properties() & Prop.USES_MEMO:
            continue
        if c.command_type is T.PROPAGATE:
            unpaired.setdefault(c.arg1, []).append(i)
            continue
        candidates = unpaired.get(c.arg1, [])
        chosen = None
        for j in reversed(candidates):
            p = commands[j]
            in_place = p.arg3 == p.arg4
            if (p.arg2 == c.arg2 and _submatrices_agree(p.arg4, c.arg4)
                    and (in_place or _submatrices_agree(p.arg3, c.arg3))):
                chosen = j
                break
        if chosen is None:
            if not candidates:
                raise FormatError(f"c{i}: Backprop of {nnet.component_names[c.arg1]} has no "
                                  f"Propagate to take its memo from")
            chosen = candidates[-1]
        candidates.remove(chosen)
        commands[chosen] = commands[chosen].with_args(arg5=next_memo)
        commands[i] = c.with_args(arg7=next_memo)
        next_memo += 1


def _fill_precomputed(parser: _Parser, nnet: "Nnet", misc_info: Any) -> None:
    comp = parser.comp
    first_use: dict[int, Command] = {}
    for c in comp.commands:
        if c.command_type in (T.PROPAGATE, T.BACKPROP, T.BACKPROP_NO_MODEL_UPDATE) and c.arg2 > 0:
            prev = first_use.get(c.arg2)
            # Prefer the Propagate: it names both the input and output rows.
            if prev is None or (prev.command_type is not T.PROPAGATE
                                and c.command_type is T.PROPAGATE):
                first_use[c.arg2] = c
    if not first_use:
        return
    comp.component_precomputed_indexes = [PrecomputedIndexesInfo()
                                          for _ in range(max(first_use) + 1)]
    for k, c in first_use.items():
        what = f"precomputed_indexes[{k}] of {nnet.component_names[c.arg1]}"
        if c.command_type is T.PROPAGATE:
            in_rows, out_rows = c.arg3, c.arg4
        else:   # Backprop: in_value or in_deriv; out_value or out_deriv.
            in_rows = c.arg3 if c.arg3 else c.arg6
            out_rows = c.arg4 if c.arg4 else c.arg5
        comp.component_precomputed_indexes[k] = PrecomputedIndexesInfo(
            None, parser.row_indexes(in_rows, what), parser.row_indexes(out_rows, what))
    compute_precomputed_indexes(comp, nnet, misc_info)


def parse_kaldi_computation(text: str, nnet: "Nnet", *, need_model_derivative: bool | None = None,
                            store_component_stats: bool = False, misc_info: Any = None,
                            where: str = "<printed computation>") -> NnetComputation:
    """An NnetComputation from the text of Kaldi's ``NnetComputation::Print``.

    ``need_model_derivative`` and ``store_component_stats`` are the request's
    (``need_model_derivative`` defaults to "some Backprop prints
    [component-pointer]").  Raises :class:`UnparseableComputation` when
    Kaldi's printer truncated something that is needed, FormatError for text
    that is not a printed computation of ``nnet``.
    """
    p = _Parser(nnet, where)
    lines = text.splitlines()
    # Anything before the 'matrix' line (e.g. the printed request) is skipped.
    start = next((i for i, line in enumerate(lines) if line.startswith("matrix")), None)
    if start is None:
        raise p.error("a printed computation starts with a 'matrix' line")
    lines = lines[start:]
    p.matrices_line(lines[0])
    command_lines: list[tuple[int, str]] = []
    for line in lines[1:]:
        if not line.strip() or line.startswith("#"):
            continue
        if (m := _DEBUG_LINE.match(line)) and not command_lines:
            mi = int(m.group(1))
            if not 0 < mi < len(p.comp.matrices):
                raise p.error(f"debug info for unknown matrix m{mi}")
            p.debug_line(mi, m.group(2) == "deriv", m.group(3))
            continue
        if (m := _COMMAND_LINE.match(line)):
            command_lines.append((int(m.group(1)), m.group(2)))
            continue
        raise p.error(f"unexpected line {line[:80]!r}")
    if need_model_derivative is None:
        need_model_derivative = any(".Backprop(" in body and "[component-pointer]" in body
                                    for _, body in command_lines)
    p.comp.need_model_derivative = need_model_derivative
    for k, (number, body) in enumerate(command_lines):
        if number != k:
            raise p.error(f"command c{number} where c{k} was expected")
        if " ... " in body:
            raise UnparseableComputation(f"command c{k} was truncated by Kaldi's printer",
                                         where)
        try:
            p.comp.commands.append(p.command(body, need_model_derivative))
        except FormatError as e:
            if isinstance(e, UnparseableComputation):
                raise
            message = str(e)
            if e.where and message.startswith(f"{e.where}: "):
                message = message[len(e.where) + 2:]
            raise p.error(f"c{k}: {message}") from None
    for i, c in enumerate(p.comp.commands):
        if (c.command_type is T.PROPAGATE and store_component_stats
                and nnet.get_component(c.arg1).properties() & Prop.STORES_STATS):
            p.comp.commands[i] = c.with_args(arg6=1)
    _assign_memos(p.comp, nnet)
    _fill_precomputed(p, nnet, misc_info)
    for c in p.comp.commands:
        if c.command_type is T.GOTO_LABEL and not (
                0 <= c.arg1 < len(p.comp.commands)
                and p.comp.commands[c.arg1].command_type is T.NO_OPERATION_LABEL):
            raise p.error(f"goto c{c.arg1} does not point at a label")
    return p.comp


def parse_kaldi_computation_file(path: str, nnet: "Nnet", **kwargs: Any) -> NnetComputation:
    with open(path, encoding="utf-8") as f:
        return parse_kaldi_computation(f.read(), nnet, where=path, **kwargs)
