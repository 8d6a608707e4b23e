"""CompositeComponent (Kaldi's nnet-simple-component): a chain of simple
components run as one, to save memory (``max-rows-process`` bounds the rows
processed at a time).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...io.kaldi_io import KaldiReader, KaldiWriter
from ..config_line import ConfigLine
from .base import (Component, Prop, UpdatableComponent, new_component_of_type, read_component,
                   register)

F32 = np.float32


@register
class CompositeComponent(UpdatableComponent):
    """A sequence of simple components applied one after the other."""

    type_name = "CompositeComponent"

    def __init__(self) -> None:
        super().__init__()
        self.components: list[Component] = []
        self.max_rows_process = 0

    def init(self, components: list[Component], max_rows_process: int) -> None:
        if not components:
            raise ValueError("CompositeComponent needs at least one component")
        for i, comp in enumerate(components):
            if not comp.properties() & Prop.SIMPLE:
                raise ValueError(f"CompositeComponent: component {i + 1} "
                                 f"({comp.type_name}) is not a simple component")
            if i > 0 and comp.input_dim() != components[i - 1].output_dim():
                raise ValueError(f"CompositeComponent: input-dim {comp.input_dim()} of "
                                 f"component {i + 1} does not match output-dim "
                                 f"{components[i - 1].output_dim()} of component {i}")
        self.components = components
        self.max_rows_process = max_rows_process

    def _updatable_subs(self) -> list[UpdatableComponent]:
        return [c for c in self.components if c.properties() & Prop.UPDATABLE]

    def is_updatable(self) -> bool:
        return bool(self._updatable_subs())

    def input_dim(self) -> int:
        return self.components[0].input_dim()

    def output_dim(self) -> int:
        return self.components[-1].output_dim()

    def properties(self) -> int:
        last = self.components[-1].properties()
        first = self.components[0].properties()
        ans = (Prop.SIMPLE | Prop.BACKPROP_NEEDS_INPUT
               | (last & (Prop.PROPAGATE_ADDS | Prop.BACKPROP_NEEDS_OUTPUT
                          | Prop.OUTPUT_CONTIGUOUS))
               | (first & (Prop.BACKPROP_ADDS | Prop.INPUT_CONTIGUOUS))
               | (Prop.UPDATABLE if self.is_updatable() else 0))
        # stats of the sub-components are stored during backprop, which then
        # needs the output of the last one.
        if last & Prop.STORES_STATS:
            ans |= Prop.BACKPROP_NEEDS_OUTPUT
        return int(ans)

    # -- configuration -----------------------------------------------------
    def init_from_config(self, cfl: ConfigLine) -> None:
        max_rows_process = cfl.get_int("max-rows-process", 4096)
        num_components = cfl.get_int("num-components", -1)
        if num_components < 1:
            raise self.config_error(cfl, "expected num-components to be defined (>= 1)")
        components: list[Component] = []
        for i in range(1, num_components + 1):
            key = f"component{i}"
            text = cfl.get_str(key)
            if text is None:
                raise self.config_error(cfl, f"expected '{key}' to be defined")
            try:
                nested = ConfigLine(text, cfl.source, cfl.line_number)
            except Exception as e:
                raise self.config_error(cfl, f"could not parse config line for '{key}': "
                                             f"{e}") from None
            comp_type = nested.get_str("type")
            comp = new_component_of_type(comp_type) if comp_type else None
            if comp is None or nested.first_token != "":
                raise self.config_error(cfl, f"could not parse config line for '{key}' "
                                             "(or undefined or bad component type [type=xxx])")
            if comp.type_name == "CompositeComponent":
                raise self.config_error(cfl, "found CompositeComponent nested within "
                                             f"CompositeComponent (in '{key}')")
            comp.init_from_config(nested)
            props = comp.properties()
            if props & Prop.RANDOM or not props & Prop.SIMPLE:
                raise self.config_error(cfl, "CompositeComponent contains disallowed component "
                                             f"type {comp.type_name} (in '{key}')")
            components.append(comp)
        try:
            self.init(components, max_rows_process)
        except ValueError as e:
            raise self.config_error(cfl, str(e)) from None

    # -- I/O -------------------------------------------------------------------
    def read(self, r: KaldiReader) -> None:
        token = self.read_updatable_common(r, read_next=True)
        if token != "<MaxRowsProcess>":
            raise r.error(f"{self.type_name}: expected token <MaxRowsProcess>, got {token[:40]}")
        max_rows_process = r.read_int32()
        r.expect_token("<NumComponents>")
        num_components = r.read_int32()
        if num_components < 0 or num_components > 100000:
            raise r.error(f"{self.type_name}: bad num-components {num_components}")
        components = [read_component(r) for _ in range(num_components)]
        try:
            self.init(components, max_rows_process)
        except ValueError as e:
            raise r.error(str(e)) from None
        r.expect_token(self.closing_tag())

    def write(self, w: KaldiWriter) -> None:
        self.write_updatable_common(w)
        w.write_token("<MaxRowsProcess>")
        w.write_int32(self.max_rows_process)
        w.write_token("<NumComponents>")
        w.write_int32(len(self.components))
        for comp in self.components:
            comp.write(w)
        w.write_token(self.closing_tag())

    def info(self) -> str:
        return f"{self.type_name} " + ", ".join(
            f"sub-component{i + 1} = {{ {c.info()} }}" for i, c in enumerate(self.components))

    # -- parameters and stats ------------------------------------------------
    def num_parameters(self) -> int:
        return sum(c.num_parameters() for c in self._updatable_subs())

    def scale(self, alpha: float) -> None:
        for c in self.components:
            c.scale(alpha)

    def add(self, alpha: float, other: Component) -> None:
        assert isinstance(other, CompositeComponent) and len(other.components) == len(
            self.components), "mismatching nnet topologies"
        for a, b in zip(self.components, other.components):
            a.add(alpha, b)

    def zero_stats(self) -> None:
        for c in self.components:
            c.zero_stats()

    def set_underlying_learning_rate(self, lrate: float) -> None:
        super().set_underlying_learning_rate(lrate)
        # a learning-rate factor at this level applies on top of the subs' own.
        for c in self._updatable_subs():
            c.set_underlying_learning_rate(self.learning_rate)

    def set_actual_learning_rate(self, lrate: float) -> None:
        super().set_actual_learning_rate(lrate)
        for c in self._updatable_subs():
            c.set_actual_learning_rate(lrate)

    def set_as_gradient(self) -> None:
        super().set_as_gradient()
        for c in self._updatable_subs():
            c.set_as_gradient()

    def perturb_params(self, stddev: float) -> None:
        for c in self._updatable_subs():
            c.perturb_params(stddev)

    def freeze_natural_gradient(self, freeze: bool) -> None:
        for c in self._updatable_subs():
            if hasattr(c, "freeze_natural_gradient"):
                c.freeze_natural_gradient(freeze)

    def dot_product(self, other: "CompositeComponent") -> float:
        return float(sum(a.dot_product(b) for a, b in zip(self.components, other.components)
                         if a.properties() & Prop.UPDATABLE))

    def vectorize(self) -> np.ndarray:
        parts = [c.vectorize() for c in self._updatable_subs()]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)

    def unvectorize(self, params: np.ndarray) -> None:
        offset = 0
        for c in self._updatable_subs():
            n = c.num_parameters()
            c.unvectorize(params[offset:offset + n])
            offset += n

    # -- math -----------------------------------------------------------------
    def propagate(self, indexes, in_value: np.ndarray, out_value: np.ndarray) -> None:
        num_rows = in_value.shape[0]
        step = self.max_rows_process
        if step > 0 and num_rows > step:
            # Kaldi processes row blocks separately to bound memory.
            for start in range(0, num_rows, step):
                self.propagate(None, in_value[start:start + step], out_value[start:start + step])
            return None
        cur = in_value
        last = len(self.components) - 1
        for i, comp in enumerate(self.components):
            if i == last:
                dest = out_value
            else:
                dest = np.zeros((num_rows, comp.output_dim()), dtype=np.float32)
            comp.propagate(None, cur, dest)
            cur = dest
        return None

    def backprop(self, debug_info: str, indexes, in_value: np.ndarray, out_value,
                 out_deriv: np.ndarray, memo, to_update, in_deriv) -> None:
        if to_update is not None and not (isinstance(to_update, CompositeComponent)
                                          and len(to_update.components) == len(self.components)):
            raise TypeError(f"{self.type_name}.backprop: to_update does not match")
        composite_backprop(self, in_value, out_value, out_deriv, to_update, in_deriv)


def composite_backprop(comp: "CompositeComponent", in_value: np.ndarray,
                       out_value: np.ndarray | None, out_deriv: np.ndarray,
                       to_update: "CompositeComponent | None",
                       in_deriv: np.ndarray | None) -> None:
    """Propagate again through the chain (keeping what each backprop needs),
    then backprop from the last component to the first; components that
    store statistics get them stored on the way (into to_update's copy)."""
    num_rows = in_value.shape[0]
    step = comp.max_rows_process
    if step > 0 and num_rows > step:
        # Row blocks, as in propagate, to bound memory.
        for start in range(0, num_rows, step):
            part = slice(start, start + step)
            composite_backprop(comp, in_value[part],
                               None if out_value is None else out_value[part],
                               out_deriv[part], to_update,
                               None if in_deriv is None else in_deriv[part])
        return
    comps = comp.components
    n = len(comps)
    outputs: list[np.ndarray | None] = [None] * n
    memos: list[Any] = [None] * n
    # Only the last component's propagate may be skipped (and then only if it
    # keeps no memo): its output is out_value.
    num_to_propagate = n if comps[-1].properties() & Prop.USES_MEMO else n - 1
    for i in range(num_to_propagate):
        outputs[i] = np.zeros((num_rows, comps[i].output_dim()), dtype=F32)
        memos[i] = comps[i].propagate(None, in_value if i == 0 else outputs[i - 1], outputs[i])
    deriv = out_deriv
    for i in range(n - 1, -1, -1):
        sub = comps[i]
        this_in = in_value if i == 0 else outputs[i - 1]
        this_out = out_value if i == n - 1 else outputs[i]
        sub_update = None if to_update is None else to_update.components[i]
        if sub_update is not None and sub.properties() & Prop.STORES_STATS:
            sub_update.store_stats(this_in, this_out, memos[i])
        if i > 0:
            this_in_deriv: np.ndarray | None = np.zeros((num_rows, sub.input_dim()), dtype=F32)
        else:
            this_in_deriv = in_deriv
        if i == 0 and not sub.properties() & Prop.UPDATABLE and in_deriv is None:
            continue
        sub.backprop("", None, this_in, this_out, deriv, memos[i], sub_update, this_in_deriv)
        deriv = this_in_deriv
