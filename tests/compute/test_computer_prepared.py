"""What the executor keeps between computers of one computation, and how it
allocates (the speed work on NnetComputer):

* the prepared form of a computation (submatrix table, index tables, command
  handlers) is made once per computation and backend, rebuilt when the
  computation changes, and dropped with the computation;
* new matrices are undefined (Kaldi's kUndefined), NaN with poison_undefined:
  a computation that zeroes what it reads gives the same result either way;
* an in-place Propagate / Backprop hands the component one object for both
  arguments, also for a part of a matrix.
"""
from __future__ import annotations

import gc
from typing import Any

import numpy as np

from pynnet3.compile.computation import Command, CommandType, NnetComputation
from pynnet3.compute import NnetComputeOptions, NnetComputer
from pynnet3.compute import computer as computer_module
from pynnet3.compute.backend import get_backend
from pynnet3.compute.backend.reference import ReferenceBackend
from pynnet3.nnet.components.base import Component, Prop
from pynnet3.nnet.nnet import Nnet

T = CommandType
F32 = np.float32


def small_nnet() -> Nnet:
    nnet = Nnet()
    nnet.read_config("input-node name=input dim=4\n"
                     "component name=fake type=NoOpComponent dim=4\n"
                     "component-node name=fake component=fake input=input\n"
                     "output-node name=output input=fake\n", "test")
    return nnet


def accumulate_computation() -> NnetComputation:
    """output = 0 + input + 0.5 * input (m2 zeroed by SetConst before use)."""
    comp = NnetComputation()
    s1, s2 = comp.new_matrix(3, 4), comp.new_matrix(3, 4)
    comp.commands += [Command(T.ACCEPT_INPUT, arg1=s1, arg2=0),
                      Command(T.ALLOC_MATRIX, arg1=s2),
                      Command(T.SET_CONST, alpha=0.0, arg1=s2),
                      Command(T.MATRIX_ADD, arg1=s2, arg2=s1),
                      Command(T.MATRIX_ADD, alpha=0.5, arg1=s2, arg2=s1),
                      Command(T.PROVIDE_OUTPUT, arg1=s2, arg2=3)]
    return comp


def run_once(comp: NnetComputation, x: np.ndarray, **options: Any) -> np.ndarray:
    computer = NnetComputer(NnetComputeOptions(**options), comp, small_nnet())
    computer.accept_input("input", x)
    computer.run()
    return np.array(computer.get_output("output"))


def test_prepared_once_rebuilt_on_change_and_dropped() -> None:
    comp = accumulate_computation()
    x = np.arange(12, dtype=F32).reshape(3, 4)
    backend = get_backend("reference")
    np.testing.assert_array_equal(run_once(comp, x), 1.5 * x)
    first = computer_module._prepared(comp, backend)
    np.testing.assert_array_equal(run_once(comp, x), 1.5 * x)
    assert computer_module._prepared(comp, backend) is first
    # Another backend object gets its own.
    assert computer_module._prepared(comp, ReferenceBackend()) is not first
    # A changed computation is prepared again: one more addition of the input.
    comp.commands.insert(5, Command(T.MATRIX_ADD, arg1=comp.commands[3].arg1,
                                    arg2=comp.commands[0].arg1))
    np.testing.assert_array_equal(run_once(comp, x), 2.5 * x)
    assert computer_module._prepared(comp, backend) is not first
    key = id(comp)
    assert key in computer_module._PREPARED
    del comp, first
    gc.collect()
    assert key not in computer_module._PREPARED


def test_undefined_and_poisoned_allocation_agree_when_zeroed() -> None:
    comp = accumulate_computation()
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(F32)
    plain = run_once(comp, x)
    poisoned = run_once(comp, x, poison_undefined=True)
    np.testing.assert_array_equal(plain, poisoned)
    assert not np.isnan(plain).any()
    undefined = get_backend("reference").alloc_undefined(5, 2)
    assert undefined.shape == (5, 2) and undefined.dtype == F32
    # Without the SetConst, poisoning shows the read of an unset value.
    comp.commands.pop(2)
    assert np.isnan(run_once(comp, x, poison_undefined=True)).all()


class InPlaceProbe(Component):
    """Records whether the two matrices of each call are one object."""

    type_name = "InPlaceProbe"

    def __init__(self) -> None:
        self.same: list[bool] = []

    def input_dim(self) -> int:
        return 4

    def output_dim(self) -> int:
        return 4

    def properties(self) -> int:
        return Prop.SIMPLE | Prop.PROPAGATE_IN_PLACE | Prop.BACKPROP_IN_PLACE

    def propagate(self, indexes: Any, in_value: np.ndarray, out_value: np.ndarray) -> Any:
        self.same.append(in_value is out_value)
        out_value *= 2
        return None

    def backprop(self, debug_info: str, indexes: Any, in_value: Any, out_value: Any,
                 out_deriv: np.ndarray, memo: Any, to_update: Any,
                 in_deriv: np.ndarray | None) -> None:
        self.same.append(in_deriv is out_deriv)
        if in_deriv is not None:
            in_deriv *= 3


def test_in_place_commands_hand_one_object() -> None:
    nnet = small_nnet()
    probe = InPlaceProbe()
    nnet.components[0] = probe
    comp = NnetComputation()
    s1 = comp.new_matrix(4, 4)
    part = comp.new_submatrix(s1, 1, 2, 0, 4)        # rows 1..2: a view, not the matrix
    s2 = comp.new_matrix(4, 4)
    comp.commands += [Command(T.ACCEPT_INPUT, arg1=s1, arg2=0),
                      Command(T.PROPAGATE, arg1=0, arg2=0, arg3=part, arg4=part),
                      Command(T.PROVIDE_OUTPUT, arg1=s1, arg2=3),
                      Command(T.NO_OPERATION_MARKER),
                      Command(T.ACCEPT_INPUT, arg1=s2, arg2=3),
                      Command(T.BACKPROP_NO_MODEL_UPDATE, arg1=0, arg2=0, arg3=0, arg4=0,
                              arg5=s2, arg6=s2),
                      Command(T.PROVIDE_OUTPUT, arg1=s2, arg2=0)]
    computer = NnetComputer(NnetComputeOptions(), comp, nnet)
    x = np.ones((4, 4), F32)
    computer.accept_input("input", x)
    computer.run()
    np.testing.assert_array_equal(computer.get_output("output")[:, 0], [1, 2, 2, 1])
    computer.accept_output_deriv("output", np.ones((4, 4), F32))
    computer.run()
    np.testing.assert_array_equal(computer.get_input_deriv("input"), np.full((4, 4), 3, F32))
    assert probe.same == [True, True]
