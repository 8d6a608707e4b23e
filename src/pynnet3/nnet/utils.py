"""Whole-network operations of Kaldi's nnet-utils.cc used by the binaries:
learning rates, scaling, test modes, dropout, orphan removal, renaming and
the ``--edits`` / ``--edits-config`` language of nnet3-copy."""
from __future__ import annotations

import fnmatch

from .. import log
from ..errors import ConfigError
from .components.base import Prop, UpdatableComponent
from .config_line import is_valid_name, parse_config_lines, read_config_lines
from .descriptor_parse import name_lookup, parse_descriptor
from .graph import find_orphan_components, find_orphan_nodes
from .nnet import Nnet, NodeType


def name_matches_pattern(name: str, pattern: str) -> bool:
    """Kaldi's NameMatchesPattern: only ``*`` is special."""
    return fnmatch.fnmatchcase(name, pattern.replace("[", "[[]").replace("?", "[?]"))


def set_learning_rate(learning_rate: float, nnet: Nnet) -> None:
    for _, comp in nnet.updatable_components():
        assert isinstance(comp, UpdatableComponent)
        comp.set_underlying_learning_rate(learning_rate)


def scale_nnet(scale: float, nnet: Nnet) -> None:
    if scale == 1.0:
        return
    for comp in nnet.components:
        comp.scale(scale)


def set_batchnorm_test_mode(test_mode: bool, nnet: Nnet) -> None:
    for comp in nnet.components:
        if comp.type_name == "BatchNormComponent":
            comp.set_test_mode(test_mode)  # type: ignore[attr-defined]


def _is_random_component(comp) -> bool:
    # Kaldi's RandomComponent subclasses: the dropout family and SpecAugment.
    return comp.type_name in ("DropoutComponent", "DropoutMaskComponent",
                              "GeneralDropoutComponent", "SpecAugmentTimeMaskComponent")


def set_dropout_test_mode(test_mode: bool, nnet: Nnet) -> None:
    for comp in nnet.components:
        if _is_random_component(comp) and hasattr(comp, "set_test_mode"):
            comp.set_test_mode(test_mode)


def _set_dropout_proportion_of(comp, proportion: float) -> bool:
    if comp.type_name in ("DropoutComponent", "DropoutMaskComponent", "GeneralDropoutComponent"):
        comp.set_dropout_proportion(proportion)
        return True
    return False


def set_dropout_proportion(proportion: float, nnet: Nnet) -> None:
    for comp in nnet.components:
        _set_dropout_proportion_of(comp, proportion)


def remove_some_nodes(nnet: Nnet, nodes_to_remove: list[int]) -> None:
    if not nodes_to_remove:
        return
    remove = set(nodes_to_remove)
    old_names = nnet.node_names
    old2new: dict[int, int] = {}
    new_nodes, new_names = [], []
    for n, (node, name) in enumerate(zip(nnet.nodes, old_names)):
        if n not in remove:
            old2new[n] = len(new_nodes)
            new_nodes.append(node)
            new_names.append(name)
    lookup = name_lookup(new_names)
    for node in new_nodes:
        if node.node_type is NodeType.DESCRIPTOR:
            assert node.descriptor is not None
            # Renumber by printing with the old names and re-parsing with the new.
            node.descriptor = parse_descriptor(node.descriptor.text(old_names), lookup)
        elif node.node_type is NodeType.DIM_RANGE:
            node.node_index = old2new[node.node_index]
    nnet.nodes = new_nodes
    nnet.node_names = new_names
    nnet.check(cycles=False)      # (removing nodes makes no cycle)


def remove_orphan_nodes(nnet: Nnet, remove_orphan_inputs: bool = False,
                        quiet: bool = False) -> None:
    """Kaldi's RemoveOrphanNodes (``quiet``: without its log line)."""
    orphans = find_orphan_nodes(nnet)
    if not remove_orphan_inputs:
        orphans = [n for n in orphans if not nnet.is_input_node(n)]
    num_removed = sum(1 for n in orphans if not nnet.is_component_input_node(n))
    remove_some_nodes(nnet, orphans)
    if not quiet:
        log.log(f"Removed {num_removed} orphan nodes.")


def remove_orphan_components(nnet: Nnet, quiet: bool = False) -> None:
    """Kaldi's RemoveOrphanComponents (``quiet``: without its log line)."""
    orphans = set(find_orphan_components(nnet))
    if not quiet:
        log.log(f"Removing {len(orphans)} orphan components.")
    remove_some_components(nnet, orphans)


def remove_some_components(nnet: Nnet, orphans: "set[int]") -> None:
    """Removes components that no node uses (renumbering the rest)."""
    if not orphans:
        return
    old2new: dict[int, int] = {}
    comps, names = [], []
    for c, (comp, name) in enumerate(zip(nnet.components, nnet.component_names)):
        if c not in orphans:
            old2new[c] = len(comps)
            comps.append(comp)
            names.append(name)
    for node in nnet.nodes:
        if node.node_type is NodeType.COMPONENT:
            node.component_index = old2new[node.component_index]
    nnet.components, nnet.component_names = comps, names
    nnet.check(cycles=False)      # (the graph is unchanged)


def set_node_name(nnet: Nnet, node_index: int, new_name: str) -> None:
    if nnet.get_node_index(new_name) != -1:
        raise ConfigError(f"cannot rename a node to {new_name}: a node with that name exists")
    if not is_valid_name(new_name):
        raise ConfigError(f"node name {new_name} is not allowed")
    nnet.node_names[node_index] = new_name


def read_edit_config(text: str | bytes, nnet: Nnet, source: str = "<edits>") -> None:
    """Apply an edits config (Kaldi's ReadEditConfig); one directive per line."""
    for cfl in parse_config_lines(read_config_lines(text, source), source):
        d = cfl.first_token
        if d in ("remove-orphan-nodes", "remove-orphans"):
            remove_inputs = cfl.get_bool("remove-orphan-inputs", False)
            cfl.check_all_used(d)
            remove_orphan_nodes(nnet, bool(remove_inputs))
            if d == "remove-orphans":
                remove_orphan_components(nnet)
        elif d == "remove-orphan-components":
            cfl.check_all_used(d)
            remove_orphan_components(nnet)
        elif d in ("set-learning-rate", "set-learning-rate-factor"):
            pattern = cfl.get_str("name", "*")
            key = "learning-rate" if d == "set-learning-rate" else "learning-rate-factor"
            value = cfl.get_float(key)
            if value is None:
                raise cfl.error(f"expected {key} to be set")
            cfl.check_all_used(d)
            count = 0
            for c, comp in nnet.updatable_components():
                if name_matches_pattern(nnet.component_names[c], pattern):
                    assert isinstance(comp, UpdatableComponent)
                    if d == "set-learning-rate":
                        comp.set_underlying_learning_rate(value)
                    else:
                        comp.learning_rate_factor = value
                    count += 1
            what = "learning rates" if d == "set-learning-rate" else "learning rate factors"
            log.log(f"Set {what} for {count} components.")
        elif d == "rename-node":
            old, new = cfl.get_str("old-name"), cfl.get_str("new-name")
            if old is None or new is None or cfl.unused_values():
                raise cfl.error("could not make sense of rename-node (expect old-name=xxx new-name=xxx)")
            n = nnet.get_node_index(old)
            if n < 0:
                raise cfl.error(f"could not rename node from {old} to {new}: no node called {old}")
            set_node_name(nnet, n, new)
        elif d == "remove-output-nodes":
            pattern = cfl.get_str("name")
            if pattern is None or cfl.unused_values():
                raise cfl.error("could not make sense of remove-output-nodes (expect name=pattern)")
            to_remove, remaining = [], 0
            for n in range(nnet.num_nodes()):
                if nnet.is_output_node(n):
                    if name_matches_pattern(nnet.node_names[n], pattern):
                        to_remove.append(n)
                    else:
                        remaining += 1
            log.log(f"Removing {len(to_remove)} output nodes.")
            if remaining == 0:
                raise cfl.error("all outputs were removed")
            remove_some_nodes(nnet, to_remove)
        elif d == "set-dropout-proportion":
            pattern = cfl.get_str("name", "*")
            proportion = cfl.get_float("proportion")
            if proportion is None:
                raise cfl.error("expected proportion to be set")
            cfl.check_all_used(d)
            count = 0
            for c, comp in enumerate(nnet.components):
                if name_matches_pattern(nnet.component_names[c], pattern):
                    count += _set_dropout_proportion_of(comp, proportion)
            log.log(f"Set dropout proportions for {count} components.")
        elif d == "convert-to-fixed-affine":
            pattern = cfl.get_str("name", "*")
            cfl.check_all_used(d)
            _convert_to_fixed_affine(nnet, pattern)
        else:
            raise cfl.error(f"directive '{d}' is not currently supported (supported: "
                            "remove-orphans, remove-orphan-nodes, remove-orphan-components, "
                            "set-learning-rate, set-learning-rate-factor, rename-node, "
                            "remove-output-nodes, set-dropout-proportion, convert-to-fixed-affine)")


def _convert_to_fixed_affine(nnet: Nnet, pattern: str) -> None:
    from .components.base import new_component_of_type

    count = 0
    for c, comp in enumerate(nnet.components):
        if (name_matches_pattern(nnet.component_names[c], pattern)
                and hasattr(comp, "linear_params") and hasattr(comp, "bias_params")
                and comp.properties() & Prop.UPDATABLE
                and comp.type_name in ("AffineComponent", "NaturalGradientAffineComponent")):
            fixed = new_component_of_type("FixedAffineComponent")
            assert fixed is not None
            fixed.linear_params = comp.linear_params.copy()  # type: ignore[attr-defined]
            fixed.bias_params = comp.bias_params.copy()  # type: ignore[attr-defined]
            nnet.components[c] = fixed
            count += 1
    log.log(f"Converted {count} components to FixedAffineComponent.")
