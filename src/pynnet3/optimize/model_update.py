"""Consolidate the model update of backprop commands (Kaldi's
ModelUpdateConsolidator and ConsolidateModelUpdate, nnet-optimize-utils).

A recurrent network runs the same updatable component once per time step,
so its backward pass holds many Backprop commands for one component, each
updating the parameters from a few rows.  This pass splits each of them into
a Backprop that only computes the input derivative
(kBackpropNoModelUpdate) and one final Backprop per component that does the
whole update at once from consolidated matrices: the inputs (and outputs,
if the component needs them) and output derivatives of all the original
commands, each copied into its own row block just before the command that
used it.  The copies are often removed again by variable merging.

Only simple, updatable components without memos are consolidated.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..compile.computation import Command, CommandType, MatrixDebugInfo, NnetComputation, StrideType
from ..compile.n_stride import cindex_array
from ..nnet.index_lists import CindexList
from ..errors import PynnetError
from ..nnet.components.base import Prop
from ..nnet.properties_cache import nnet_component_properties

__all__ = ["consolidate_model_update", "ModelUpdateConsolidator"]

T = CommandType
_P_BACKPROP_NEEDS_INPUT = int(Prop.BACKPROP_NEEDS_INPUT)
_P_BACKPROP_NEEDS_OUTPUT = int(Prop.BACKPROP_NEEDS_OUTPUT)
_P_SIMPLE = int(Prop.SIMPLE)
_P_UPDATABLE = int(Prop.UPDATABLE)
_P_USES_MEMO = int(Prop.USES_MEMO)
_T_BACKPROP = int(T.BACKPROP)


class ModelUpdateConsolidator:
    """Kaldi's ModelUpdateConsolidator; use :func:`consolidate_model_update`."""

    def __init__(self, nnet: Any, computation: NnetComputation) -> None:
        self.nnet = nnet
        self.computation = computation
        # extra_commands[c]: commands to insert just before original command c.
        self.extra_commands: dict[int, list[Command]] = {}
        # The consolidated Backprop commands, placed after everything else but
        # before final_deallocate_commands.
        self.final_commands: list[Command] = []
        self.final_deallocate_commands: list[Command] = []

    def consolidate_model_update(self) -> bool:
        nnet = self.nnet
        backprop_commands: list[list[int]] = [[] for _ in range(nnet.num_components())]
        wanted = _P_UPDATABLE | _P_SIMPLE
        props = nnet_component_properties(nnet)
        table = self.computation.command_table()
        backprops = np.flatnonzero(table[:, 0] == _T_BACKPROP)
        for c, component in zip(backprops.tolist(), table[backprops, 1].tolist()):
            properties = props[component]
            if properties & wanted == wanted and not properties & _P_USES_MEMO:
                backprop_commands[component].append(c)
        consolidated = False
        for component, commands in enumerate(backprop_commands):
            if len(commands) > 1:
                self.consolidate_update_for_component(component, commands)
                consolidated = True
        if consolidated:
            self.add_commands_to_computation()
        return consolidated

    def consolidate_update_for_component(self, component_index: int,
                                         backprop_commands: list[int]) -> None:
        properties = int(self.nnet.get_component(component_index).properties())
        need_input = bool(properties & _P_BACKPROP_NEEDS_INPUT)
        need_output = bool(properties & _P_BACKPROP_NEEDS_OUTPUT)
        commands = self.computation.commands
        inputs, outputs, out_derivs = [], [], []
        for c in backprop_commands:
            command = commands[c]
            if command.command_type is not T.BACKPROP or command.arg2 != 0:
                raise PynnetError("consolidate_model_update: simple component with "
                                  "precomputed indexes (code error)")
            if (command.arg3 != 0) != need_input or (command.arg4 != 0) != need_output:
                raise PynnetError("consolidate_model_update: backprop arguments disagree "
                                  "with the component's properties")
            # The original command now only computes the input derivative.
            commands[c] = Command(T.BACKPROP_NO_MODEL_UPDATE, command.alpha, *command.args)
            inputs.append(command.arg3)
            outputs.append(command.arg4)
            out_derivs.append(command.arg5)
        input_sub = self.consolidate_submatrices(backprop_commands, inputs) if need_input else 0
        output_sub = self.consolidate_submatrices(backprop_commands, outputs) if need_output else 0
        out_deriv_sub = self.consolidate_submatrices(backprop_commands, out_derivs)
        # No precomputed indexes (simple component), no input derivative, no memo.
        self.final_commands.append(Command(T.BACKPROP, 1.0, component_index, 0, input_sub,
                                           output_sub, out_deriv_sub, 0, 0))

    def consolidate_submatrices(self, commands: list[int], submatrices: list[int]) -> int:
        """A new matrix holding, one row block each, the values submatrices[i]
        have just before command commands[i] (a copy is inserted there).
        Returns the submatrix of the whole new matrix."""
        comp = self.computation
        if len(submatrices) <= 1 or len(commands) != len(submatrices):
            raise PynnetError("consolidate_submatrices: need two or more submatrices")
        num_cols = comp.submatrices[submatrices[0]].num_cols
        num_rows = 0
        stride_type = StrideType.DEFAULT
        have_debug = bool(comp.matrix_debug_info)
        debug_parts: list[np.ndarray] = []
        is_deriv = False
        for s in submatrices:
            info = comp.submatrices[s]
            if info.num_cols != num_cols:
                raise PynnetError("consolidate_submatrices: column counts differ")
            num_rows += info.num_rows
            if have_debug:
                is_deriv, part = self._debug_rows(s)
                debug_parts.append(part)
            if comp.is_whole_matrix(s) and \
                    comp.matrices[info.matrix_index].stride_type is StrideType.EQUAL_NUM_COLS:
                stride_type = StrideType.EQUAL_NUM_COLS
        new_whole = comp.new_matrix(num_rows, num_cols, stride_type)
        # Allocated and zeroed at the very start (later passes drop the
        # zeroing where it is not needed and move the allocation).
        extra = self.extra_commands.setdefault(0, [])
        extra.append(Command(T.ALLOC_MATRIX, arg1=new_whole))
        extra.append(Command(T.SET_CONST, 0.0, new_whole))
        self.final_deallocate_commands.append(Command(T.DEALLOC_MATRIX, arg1=new_whole))
        if have_debug:
            m = comp.submatrices[new_whole].matrix_index
            comp.matrix_debug_info[m] = MatrixDebugInfo(
                is_deriv, CindexList(np.ascontiguousarray(np.concatenate(debug_parts))))
        row_offset = 0
        for c, s in zip(commands, submatrices):
            rows = comp.submatrices[s].num_rows
            part = comp.new_submatrix(new_whole, row_offset, rows, 0, num_cols)
            self.extra_commands.setdefault(c, []).append(Command(T.MATRIX_COPY, 1.0, part, s))
            row_offset += rows
        return new_whole

    def _debug_rows(self, s: int) -> tuple[bool, np.ndarray]:
        """(is_deriv, cindex rows) of submatrix s, from its matrix's debug info."""
        comp = self.computation
        info = comp.submatrices[s]
        debug = comp.matrix_debug_info[info.matrix_index]
        if len(debug.cindexes) != comp.matrices[info.matrix_index].num_rows:
            raise PynnetError(f"debug info of m{info.matrix_index} has the wrong size")
        arr = cindex_array(debug.cindexes)
        return debug.is_deriv, arr[info.row_offset:info.row_offset + info.num_rows]

    def add_commands_to_computation(self) -> None:
        comp = self.computation
        commands = comp.commands
        if self.extra_commands and max(self.extra_commands) >= len(commands):
            raise PynnetError("add_commands_to_computation: commands changed (code error)")
        new_commands: list[Command] = []
        done = 0
        for c in sorted(self.extra_commands):
            new_commands.extend(commands[done:c])
            new_commands.extend(self.extra_commands[c])
            done = c
        new_commands.extend(commands[done:])
        new_commands.extend(self.final_commands)
        new_commands.extend(self.final_deallocate_commands)
        comp.commands = new_commands


def consolidate_model_update(nnet: Any, computation: NnetComputation) -> bool:
    """Kaldi's ConsolidateModelUpdate, in place (nothing to do unless the
    computation computes a model derivative).  Returns whether it changed
    the computation."""
    if not computation.need_model_derivative:
        return False
    return ModelUpdateConsolidator(nnet, computation).consolidate_model_update()
