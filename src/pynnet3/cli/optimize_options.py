"""Kaldi's ``--optimization.<flag>`` options on a click command, registered
from the flag names and help texts that :class:`~pynnet3.optimize.options.OptimizeOptions`
carries in its fields' metadata."""
from __future__ import annotations

from dataclasses import fields
from typing import Any, Callable, Mapping

import click

from ..optimize.options import FLAG_PREFIX, OptimizeOptions
from .common import BOOL

__all__ = ["register_click_options", "options_from_click_kwargs"]


def _flagged() -> list[Any]:
    return [f for f in fields(OptimizeOptions) if f.metadata.get("flag")]


def _param_name(field_name: str) -> str:
    return f"{FLAG_PREFIX}_{field_name}"


def register_click_options(command: Callable) -> Callable:
    """Decorator adding Kaldi's ``--optimization.<flag>`` options to a click
    command.  The values arrive as keyword arguments ``optimization_<field>``;
    turn them back into an :class:`OptimizeOptions` with
    :func:`options_from_click_kwargs`."""
    defaults = OptimizeOptions()
    # click applies decorators bottom-up; add in reverse so --help lists
    # them in Kaldi's order.
    for f in reversed(_flagged()):
        default = getattr(defaults, f.name)
        command = click.option(f"--{FLAG_PREFIX}.{f.metadata['flag']}", _param_name(f.name),
                               type=BOOL if isinstance(default, bool) else int,
                               default=default, show_default=True,
                               help=f.metadata["help"])(command)
    return command


def options_from_click_kwargs(kwargs: Mapping[str, Any] | dict[str, Any],
                              pop: bool = True, **overrides: Any) -> OptimizeOptions:
    """The OptimizeOptions of the ``optimization_<field>`` keyword arguments
    that :func:`register_click_options` produced (removed from ``kwargs``
    when ``pop``); ``overrides`` set hidden fields."""
    values: dict[str, Any] = {}
    for f in _flagged():
        key = _param_name(f.name)
        if key in kwargs:
            values[f.name] = kwargs.pop(key) if pop and isinstance(kwargs, dict) else kwargs[key]
    values.update(overrides)
    return OptimizeOptions(**values)
