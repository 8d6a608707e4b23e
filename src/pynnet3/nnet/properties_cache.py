"""Component property flags, asked once per component while compiling.

The compiler, the analysis and the optimization passes ask for
``component.properties()`` thousands of times per compilation (every
analysis of the computation asks again), and each call builds the flags
from IntFlag values, which is slow.  Within :func:`component_properties_cached`
(the computation cache and the optimizer open it around their work) the
answer for each component object is kept; nothing there changes a
component.  Outside it :func:`component_properties` just asks.
"""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Iterator

__all__ = ["component_properties", "component_properties_cached", "nnet_component_properties",
           "block_memo"]

# id(component) -> (component, flags), and ("nnet", id(nnet)) -> (nnet, flags
# of all its components); the objects are kept so that their ids cannot be
# reused by other objects while the cache lives.
_CACHE: ContextVar[dict[Any, tuple[Any, Any]] | None] = ContextVar(
    "pynnet3_component_properties", default=None)


@contextmanager
def component_properties_cached() -> Iterator[None]:
    """Remember property flags until the (outermost) block ends."""
    if _CACHE.get() is not None:
        yield
        return
    token = _CACHE.set({})
    try:
        yield
    finally:
        _CACHE.reset(token)


def component_properties(component: Any) -> int:
    """``int(component.properties())``, remembered inside
    :func:`component_properties_cached`."""
    cache = _CACHE.get()
    if cache is None:
        return int(component.properties())
    hit = cache.get(id(component))
    if hit is None or hit[0] is not component:
        hit = cache[id(component)] = (component, int(component.properties()))
    return hit[1]


def nnet_component_properties(nnet: Any) -> list[int]:
    """The property flags of every component of ``nnet``, in order."""
    cache = _CACHE.get()
    if cache is None:
        return [int(c.properties()) for c in nnet.components]
    key = ("nnet", id(nnet))
    hit = cache.get(key)
    if hit is None or hit[0] is not nnet:
        hit = cache[key] = (nnet, [component_properties(c) for c in nnet.components])
    return hit[1]


def block_memo() -> dict[Any, tuple[Any, Any]] | None:
    """The dictionary that lives as long as the current
    :func:`component_properties_cached` block (one compilation), or None
    outside one.  Keys are tuples starting with a string naming the user;
    values keep the objects their keys name by id (see ``_CACHE``)."""
    return _CACHE.get()
