"""The Nnet: named components plus a list of network nodes.

As in Kaldi's nnet-nnet.h, nodes are of four types:

* ``input``      (``input-node name=input dim=40``),
* ``descriptor`` (the input of a component node, named ``<name>_input`` and
  placed immediately before it, or an ``output-node``),
* ``component``  (``component-node name=x component=c input=<descriptor>``),
* ``dim-range``  (``dim-range-node name=r input-node=x dim-offset=0 dim=8``).

A component-node line therefore creates two nodes.  Node order is the order
of the config lines (redefining a name replaces its old line), and the config
text written into model files is regenerated from the nodes.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Iterator

from ..errors import ConfigError, FormatError
from ..io.kaldi_io import KaldiReader, KaldiWriter
from .components.base import (Component, Prop, c_float_arithmetic, new_component_of_type,
                              read_component)
from .config_line import ConfigLine, is_valid_name, parse_config_lines, read_config_lines
from .descriptor import Descriptor
from .descriptor_parse import name_lookup, parse_descriptor
from .graph import check_no_instantaneous_cycles


class NodeType(enum.Enum):
    INPUT = "input"
    DESCRIPTOR = "descriptor"
    COMPONENT = "component"
    DIM_RANGE = "dim-range"


class ObjectiveType(enum.Enum):
    LINEAR = "linear"
    QUADRATIC = "quadratic"


@dataclass
class NetworkNode:
    node_type: NodeType
    descriptor: Descriptor | None = None
    # input and dim-range nodes: their dim; dim-range nodes: also the offset.
    dim: int = -1
    dim_offset: int = -1
    # component nodes: index into Nnet.components.
    component_index: int = -1
    # dim-range nodes: the node they take a range of.
    node_index: int = -1
    # output (descriptor) nodes: objective type.
    objective_type: ObjectiveType = ObjectiveType.LINEAR


@dataclass
class Nnet:
    nodes: list[NetworkNode] = field(default_factory=list)
    node_names: list[str] = field(default_factory=list)
    components: list[Component] = field(default_factory=list)
    component_names: list[str] = field(default_factory=list)
    # Where each node was defined (file, line), for error messages only.
    node_origin: dict[str, tuple[str | None, int | None]] = field(
        default_factory=dict, repr=False, compare=False)
    # (Not a field: the node-name lookup of the descriptors while read_config
    # parses them, made once per config instead of once per descriptor.)
    _descriptor_lookup = None

    # -- lookup --------------------------------------------------------------
    def num_nodes(self) -> int:
        return len(self.nodes)

    def num_components(self) -> int:
        return len(self.components)

    def get_node_index(self, name: str) -> int:
        try:
            return self.node_names.index(name)
        except ValueError:
            return -1

    def get_component_index(self, name: str) -> int:
        try:
            return self.component_names.index(name)
        except ValueError:
            return -1

    def get_component(self, c: int) -> Component:
        return self.components[c]

    def component_for_node(self, node: int) -> Component:
        return self.components[self.nodes[node].component_index]

    def is_input_node(self, n: int) -> bool:
        return self.nodes[n].node_type is NodeType.INPUT

    def is_descriptor_node(self, n: int) -> bool:
        return self.nodes[n].node_type is NodeType.DESCRIPTOR

    def is_component_node(self, n: int) -> bool:
        return self.nodes[n].node_type is NodeType.COMPONENT

    def is_dim_range_node(self, n: int) -> bool:
        return self.nodes[n].node_type is NodeType.DIM_RANGE

    def is_output_node(self, n: int) -> bool:
        return (self.nodes[n].node_type is NodeType.DESCRIPTOR
                and (n + 1 == len(self.nodes)
                     or self.nodes[n + 1].node_type is not NodeType.COMPONENT))

    def is_component_input_node(self, n: int) -> bool:
        return (n + 1 < len(self.nodes)
                and self.nodes[n].node_type is NodeType.DESCRIPTOR
                and self.nodes[n + 1].node_type is NodeType.COMPONENT)

    def input_node_names(self) -> list[str]:
        return [self.node_names[n] for n in range(len(self.nodes)) if self.is_input_node(n)]

    def output_node_names(self) -> list[str]:
        return [self.node_names[n] for n in range(len(self.nodes)) if self.is_output_node(n)]

    def node_dim(self, n: int) -> int:
        node = self.nodes[n]
        t = node.node_type
        if t is NodeType.INPUT or t is NodeType.DIM_RANGE:
            return node.dim
        if t is NodeType.DESCRIPTOR:
            assert node.descriptor is not None
            return node.descriptor.dim(self.node_dim)
        return self.components[node.component_index].output_dim()

    def input_dim(self, name: str) -> int:
        n = self.get_node_index(name)
        if n < 0 or not self.is_input_node(n):
            return -1
        return self.node_dim(n)

    def output_dim(self, name: str) -> int:
        n = self.get_node_index(name)
        if n < 0 or not self.is_output_node(n):
            return -1
        return self.node_dim(n)

    def modulus(self) -> int:
        from math import lcm

        ans = 1
        for node in self.nodes:
            if node.node_type is NodeType.DESCRIPTOR:
                assert node.descriptor is not None
                ans = lcm(ans, node.descriptor.modulus())
        return ans

    def updatable_components(self) -> Iterator[tuple[int, Component]]:
        for c, comp in enumerate(self.components):
            if comp.properties() & Prop.UPDATABLE:
                yield c, comp

    def num_parameters(self) -> int:
        return sum(comp.num_parameters() for _, comp in self.updatable_components())

    # -- config text -----------------------------------------------------------
    def get_as_config_line(self, n: int, include_dim: bool) -> str:
        node = self.nodes[n]
        name = self.node_names[n]
        t = node.node_type
        if t is NodeType.INPUT:
            return f"input-node name={name} dim={node.dim}"
        if t is NodeType.DESCRIPTOR:
            assert node.descriptor is not None and self.is_output_node(n)
            s = f"output-node name={name} input={node.descriptor.text(self.node_names)}"
            if include_dim:
                s += f" dim={self.node_dim(n)}"
            return s + f" objective={node.objective_type.value}"
        if t is NodeType.COMPONENT:
            desc = self.nodes[n - 1].descriptor
            assert desc is not None
            s = (f"component-node name={name} component={self.component_names[node.component_index]}"
                 f" input={desc.text(self.node_names)}")
            if include_dim:
                s += f" input-dim={self.node_dim(n - 1)} output-dim={self.node_dim(n)}"
            return s
        return (f"dim-range-node name={name} input-node={self.node_names[node.node_index]}"
                f" dim-offset={node.dim_offset} dim={node.dim}")

    def get_config_lines(self, include_dim: bool = False) -> list[str]:
        return [self.get_as_config_line(n, include_dim) for n in range(len(self.nodes))
                if not self.is_component_input_node(n)]

    # -- reading configs (nnet3-init) -------------------------------------------
    def read_config(self, text: str | bytes, source: str = "<config>") -> None:
        """Apply a config file (Kaldi's Nnet::ReadConfig); ``text`` may be the
        file's bytes (any bytes are allowed in comments).

        Existing nodes are turned back into config lines and the new lines are
        appended; a node defined again replaces its earlier definition, a
        component defined again replaces the existing component.
        """
        existing = [ConfigLine(line, "<existing model>", None)
                    for line in self.get_config_lines(include_dim=False)]
        new_lines = parse_config_lines(read_config_lines(text, source), source)
        lines = self._remove_redundant_config_lines(existing, new_lines)
        self.node_origin = {}
        for cfl in lines:
            if cfl.first_token != "component" and cfl.line_number is not None:
                name = cfl.get_str("name")
                assert name is not None
                self.node_origin[name] = (cfl.source, cfl.line_number)
                if cfl.first_token == "component-node":
                    self.node_origin[name + "_input"] = (cfl.source, cfl.line_number)
        self.nodes = []
        self.node_names = []
        initial_num_components = len(self.components)
        added_components: set[str] = set()
        try:
            for pass_ in (0, 1):
                # Pass 1 adds no nodes: the descriptors' name lookup is made once.
                self._descriptor_lookup = (name_lookup(self._descriptor_node_names())
                                           if pass_ == 1 else None)
                for cfl in lines:
                    kind = cfl.first_token
                    if kind == "component":
                        if pass_ == 0:
                            self._process_component_line(cfl, initial_num_components,
                                                         added_components)
                    elif kind == "component-node":
                        self._process_component_node_line(pass_, cfl)
                    elif kind == "input-node":
                        if pass_ == 0:
                            self._process_input_node_line(cfl)
                    elif kind == "output-node":
                        self._process_output_node_line(pass_, cfl)
                    elif kind == "dim-range-node":
                        self._process_dim_range_node_line(pass_, cfl)
                    else:
                        raise cfl.error(f"invalid config line type '{kind}' (expected "
                                        "component, component-node, input-node, output-node "
                                        "or dim-range-node)")
        finally:
            self._descriptor_lookup = None
        try:
            self.check()
        except ConfigError as e:
            if e.source is not None:
                raise
            # A problem of the whole network (no nodes, no input or output
            # node): name the config that left it so.
            note = "" if new_lines else " (the config has no lines other than comments)"
            raise ConfigError(f"{e}{note}", source) from None

    @staticmethod
    def _remove_redundant_config_lines(existing: list[ConfigLine],
                                       new: list[ConfigLine]) -> list[ConfigLine]:
        lines = existing + new
        num_initial = len(existing)
        last_line: dict[str, int] = {}
        component_names: set[str] = set()
        remove: set[int] = set()
        for i, cfl in enumerate(lines):
            name = cfl.get_str("name")
            if name is None:
                raise cfl.error("config line has no field name=...")
            if not is_valid_name(name):
                raise cfl.error(f"name '{name}' is not allowed")
            if cfl.first_token == "component":
                if name in component_names:
                    raise cfl.error(f"component name {name} appears twice in the same config file")
                component_names.add(name)
            else:
                prev = last_line.get(name)
                if prev is not None:
                    if prev >= num_initial:
                        raise cfl.error(f"node name {name} appears twice in the same config file")
                    remove.add(prev)
                last_line[name] = i
        return [cfl for i, cfl in enumerate(lines) if i not in remove]

    def _descriptor_node_names(self) -> list[str]:
        # Descriptors may only refer to input, component and dim-range nodes:
        # Kaldi hides descriptor-node names ("**") while parsing.
        return [name if node.node_type is not NodeType.DESCRIPTOR else "**"
                for node, name in zip(self.nodes, self.node_names)]

    def _parse_descriptor(self, cfl: ConfigLine) -> Descriptor:
        text = cfl.get_str("input")
        if text is None:
            raise cfl.error("expected input=<descriptor>")
        try:
            names = self._descriptor_lookup
            return parse_descriptor(text, names if names is not None
                                    else self._descriptor_node_names())
        except ConfigError as e:
            raise cfl.error(f"error parsing descriptor input={text}: {e}") from None

    def _process_component_line(self, cfl: ConfigLine, initial_num_components: int,
                                added: set[str]) -> None:
        name = cfl.get_str("name")
        assert name is not None
        type_name = cfl.get_str("type")
        if type_name is None:
            raise cfl.error("expected field type=<component-type>")
        comp = new_component_of_type(type_name)
        if comp is None:
            raise cfl.error(f"unknown component type '{type_name}'")
        try:
            comp.init_from_config(cfl)
        except MemoryError as e:
            # Dimensions are int32 (checked as they are read) but their product
            # may still be far beyond memory: a clear error, not a crash.
            raise cfl.error(f"component {name}: not enough memory to initialize it "
                            f"({e or 'allocation failed'})") from None
        cfl.check_all_used(f"component {name}")
        index = self.get_component_index(name)
        if index >= 0:
            if index >= initial_num_components:
                raise cfl.error(f"you are adding two components with the same name: '{name}'")
            self.components[index] = comp
        else:
            self.components.append(comp)
            self.component_names.append(name)
        added.add(name)

    def _process_component_node_line(self, pass_: int, cfl: ConfigLine) -> None:
        name = cfl.get_str("name")
        assert name is not None
        if pass_ == 0:
            for nm in (name + "_input", name):
                if self.get_node_index(nm) >= 0:
                    raise cfl.error(f"node name {nm} is already defined")
            self.nodes.append(NetworkNode(NodeType.DESCRIPTOR))
            self.nodes.append(NetworkNode(NodeType.COMPONENT))
            self.node_names += [name + "_input", name]
            return
        node_index = self.get_node_index(name)
        comp_name = cfl.get_str("component")
        if comp_name is None:
            raise cfl.error("expected component=<component-name>")
        c = self.get_component_index(comp_name)
        if c < 0:
            raise cfl.error(f"no component named '{comp_name}'")
        self.nodes[node_index].component_index = c
        self.nodes[node_index - 1].descriptor = self._parse_descriptor(cfl)
        cfl.check_all_used(f"component-node {name}")

    def _process_input_node_line(self, cfl: ConfigLine) -> None:
        name = cfl.get_str("name")
        assert name is not None
        dim = cfl.get_int("dim")
        if dim is None:
            raise cfl.error("expected field dim=<input-dim>")
        cfl.check_all_used(f"input-node {name}")
        if self.get_node_index(name) >= 0:
            raise cfl.error(f"node name {name} is already defined")
        if dim <= 0:
            raise cfl.error(f"invalid dimension dim={dim}")
        self.nodes.append(NetworkNode(NodeType.INPUT, dim=dim))
        self.node_names.append(name)

    def _process_output_node_line(self, pass_: int, cfl: ConfigLine) -> None:
        name = cfl.get_str("name")
        assert name is not None
        if pass_ == 0:
            if self.get_node_index(name) >= 0:
                raise cfl.error(f"node name {name} is already defined")
            self.nodes.append(NetworkNode(NodeType.DESCRIPTOR))
            self.node_names.append(name)
            return
        n = self.get_node_index(name)
        node = self.nodes[n]
        node.descriptor = self._parse_descriptor(cfl)
        objective = cfl.get_str("objective", "linear")
        try:
            node.objective_type = ObjectiveType(objective)
        except ValueError:
            raise cfl.error(f"invalid objective type '{objective}' (expected linear or quadratic)") from None
        cfl.check_all_used(f"output-node {name}")

    def _process_dim_range_node_line(self, pass_: int, cfl: ConfigLine) -> None:
        name = cfl.get_str("name")
        assert name is not None
        if pass_ == 0:
            if self.get_node_index(name) >= 0:
                raise cfl.error(f"node name {name} is already defined")
            self.nodes.append(NetworkNode(NodeType.DIM_RANGE))
            self.node_names.append(name)
            return
        n = self.get_node_index(name)
        src_name = cfl.get_str("input-node")
        if src_name is None:
            raise cfl.error("expected input-node=<input-node-name>")
        dim = cfl.get_int("dim")
        if dim is None:
            raise cfl.error("expected dim=<feature-dim>")
        dim_offset = cfl.get_int("dim-offset")
        if dim_offset is None:
            raise cfl.error("expected dim-offset=<dimension-offset>")
        src = self.get_node_index(src_name)
        if src < 0 or self.nodes[src].node_type not in (NodeType.COMPONENT, NodeType.INPUT):
            raise cfl.error(f"invalid input-node {src_name} (must be a component-node or input-node)")
        cfl.check_all_used(f"dim-range-node {name}")
        node = self.nodes[n]
        node.node_index = src
        node.dim = dim
        node.dim_offset = dim_offset

    # -- validation ------------------------------------------------------------
    def node_error(self, n: int, message: str) -> ConfigError:
        """A ConfigError about node ``n``, located at its config line when known."""
        source, line = self.node_origin.get(self.node_names[n], (None, None))
        return ConfigError(message, source, line)

    def check(self, cycles: bool = True) -> None:
        """Kaldi's Nnet::Check, raising ConfigError with the node named.

        ``cycles``: also refuse instantaneous cycles (pynnet3's own check,
        the costlier part); callers that only removed nodes or components
        of a checked network, which cannot make a cycle, pass False."""
        if not self.nodes:
            raise ConfigError("the network has no nodes")
        num_inputs = num_outputs = 0
        for n, node in enumerate(self.nodes):
            name = self.node_names[n]
            t = node.node_type
            if t is NodeType.INPUT:
                num_inputs += 1
            elif t is NodeType.DESCRIPTOR:
                if self.is_output_node(n):
                    num_outputs += 1
                assert node.descriptor is not None
                for src in node.descriptor.get_node_dependencies():
                    if self.nodes[src].node_type is NodeType.DESCRIPTOR:
                        raise self.node_error(n, f"invalid source node type in descriptor of node "
                                          f"{name}: source node {self.node_names[src]}")
            elif t is NodeType.COMPONENT:
                comp = self.components[node.component_index]
                try:
                    src_dim = self.node_dim(n - 1)
                except ConfigError as e:
                    raise self.node_error(n, f"error in descriptor for node {name}: {e}") from None
                if src_dim != comp.input_dim():
                    raise self.node_error(
                        n, f"dimension mismatch for network-node {name}: input-dim {src_dim} versus "
                        f"component-input-dim {comp.input_dim()} (component "
                        f"{self.component_names[node.component_index]}, type {comp.type_name})")
            else:
                src = node.node_index
                if self.nodes[src].node_type not in (NodeType.INPUT, NodeType.COMPONENT):
                    raise self.node_error(n, f"invalid source node type in dim-range node {name}")
                input_dim = self.node_dim(src)
                if not (node.dim > 0 and node.dim_offset >= 0
                        and node.dim + node.dim_offset <= input_dim):
                    raise self.node_error(n, f"invalid node dimensions for dim-range node {name}: "
                                      f"input-dim={input_dim}, dim={node.dim}, "
                                      f"dim-offset={node.dim_offset}")
        if num_inputs == 0:
            raise ConfigError("the network has no input-node")
        if num_outputs == 0:
            raise ConfigError("the network has no output-node")
        if cycles:
            check_no_instantaneous_cycles(self)

    # -- model files -------------------------------------------------------------
    @classmethod
    def read(cls, r: KaldiReader) -> "Nnet":
        """Read ``<Nnet3> ... </Nnet3>`` (Kaldi's Nnet::Read)."""
        r.expect_token("<Nnet3>")
        data = r.data
        # The config section is plain text lines, terminated by an empty line.
        nl = data.find(b"\n", r.pos)
        if nl < 0 or data[r.pos:nl].strip(b"\r") != b"":
            raise r.error("expected a newline after <Nnet3>")
        pos = nl + 1
        config_lines = []
        while True:
            nl = data.find(b"\n", pos)
            if nl < 0:
                raise r.error("file ended inside the config section of <Nnet3>")
            line = data[pos:nl].rstrip(b"\r")
            pos = nl + 1
            if not line:
                break
            config_lines.append(line)
        r.pos = pos
        r.expect_token("<NumComponents>")
        num_components = r.read_int32()
        if not 0 <= num_components < 100000:
            raise r.error(f"bad number of components {num_components}")
        nnet = cls()
        for _ in range(num_components):
            r.expect_token("<ComponentName>")
            name = r.read_token()
            nnet.component_names.append(name)
            nnet.components.append(read_component(r))
        r.expect_token("</Nnet3>")
        try:
            nnet.read_config(b"\n".join(config_lines), f"{r.name} (config section)")
        except ConfigError as e:
            raise FormatError(str(e), where=r.name) from None
        return nnet

    def write(self, w: KaldiWriter) -> None:
        w.write_token("<Nnet3>")
        w.write_raw("\n")
        for line in self.get_config_lines(include_dim=False):
            w.write_raw(line + "\n")
        w.write_raw("\n")
        w.write_token("<NumComponents>")
        w.write_int32(len(self.components))
        if not w.binary:
            w.write_raw("\n")
        for name, comp in zip(self.component_names, self.components):
            w.write_token("<ComponentName>")
            w.write_token(name)
            comp.write(w)
            if not w.binary:
                w.write_raw("\n")
        w.write_token("</Nnet3>")

    # -- summary ---------------------------------------------------------------
    def info(self) -> str:
        """What ``nnet3-info`` prints after the context lines (those need
        computation graphs: ``compile.graph.context.nnet_info`` adds them)."""
        out = []
        out.append(f"num-parameters: {self.num_parameters()}\n")
        out.append(f"modulus: {self.modulus()}\n")
        out.extend(line + "\n" for line in self.get_config_lines(include_dim=True))
        # The components' statistics follow C++ float arithmetic (inf, NaN).
        with c_float_arithmetic():
            for name, comp in zip(self.component_names, self.components):
                out.append(f"component name={name} type={comp.info()}\n")
        return "".join(out)


def new_component(type_name: str) -> Component:
    comp = new_component_of_type(type_name)
    if comp is None:
        raise ConfigError(f"unknown component type '{type_name}'")
    return comp
