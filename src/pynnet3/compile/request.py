"""What a computation is asked to do (Kaldi's ComputationRequest).

Each input or output is an :class:`IoSpecification`: a node name, the list
of Indexes wanted (in the order the caller will supply or read the rows) and
whether a derivative goes with it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..nnet.index import Index, print_indexes


@dataclass
class IoSpecification:
    name: str = ""
    indexes: list[Index] = field(default_factory=list)
    has_deriv: bool = False

    @classmethod
    def from_range(cls, name: str, t_start: int, t_end: int,
                   has_deriv: bool = False) -> "IoSpecification":
        """Indexes (0, t, 0) for t in [t_start, t_end)."""
        return cls(name, [Index(0, t, 0) for t in range(t_start, t_end)], has_deriv)

    def print(self) -> str:
        """IoSpecification::Print, newline included."""
        return (f"name={self.name}, has-deriv={'true' if self.has_deriv else 'false'}, "
                f"indexes={print_indexes(self.indexes)}\n")


@dataclass
class MiscComputationInfo:
    """Kaldi keeps this empty; it is passed to the components' compiler hooks."""

    def print(self) -> str:
        return ""


@dataclass
class ComputationRequest:
    inputs: list[IoSpecification] = field(default_factory=list)
    outputs: list[IoSpecification] = field(default_factory=list)
    need_model_derivative: bool = False
    store_component_stats: bool = False
    misc_info: MiscComputationInfo = field(default_factory=MiscComputationInfo)

    def need_derivatives(self) -> bool:
        """True if the model or any input needs a derivative.

        Kaldi also insists that some output then has a derivative.
        """
        ans = self.need_model_derivative or any(io.has_deriv for io in self.inputs)
        if ans and not any(io.has_deriv for io in self.outputs):
            from ..errors import PynnetError

            raise PynnetError("derivatives are requested but no output has has_deriv=true")
        return ans

    def index_for_input(self, node_name: str) -> int:
        return _index_for(self.inputs, node_name, "input")

    def index_for_output(self, node_name: str) -> int:
        return _index_for(self.outputs, node_name, "output")

    def print(self) -> str:
        """ComputationRequest::Print."""
        out = [" # Computation request:\n"]
        for i, io in enumerate(self.inputs):
            out.append(f"input-{i}: " + io.print())
        for i, io in enumerate(self.outputs):
            out.append(f"output-{i}: " + io.print())
        out.append(f"need-model-derivative: {'true' if self.need_model_derivative else 'false'}\n")
        out.append(f"store-component-stats: {'true' if self.store_component_stats else 'false'}\n")
        out.append(self.misc_info.print())
        return "".join(out)


def _index_for(ios: list[IoSpecification], node_name: str, what: str) -> int:
    found = [i for i, io in enumerate(ios) if io.name == node_name]
    if len(found) > 1:
        from ..errors import PynnetError

        raise PynnetError(f"two {what}s named {node_name} in the computation request")
    return found[0] if found else -1
