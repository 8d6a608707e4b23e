"""SHA-1, SHA-256 and BLAKE2b without OpenSSL.

``import hashlib`` loads OpenSSL's libcrypto (through ``_hashlib``), which
adds about 3.5 MB to the resident memory of every process that imports it.
pynnet3 hashes only short keys and its own source (the computation cache's
keys, long temporary-file names), for which CPython's built-in
implementations are as good; they give the same digests.  hashlib is the
fallback where those modules are missing.

The implementation is looked up once, on first use: a failing import is not
cached by Python, so trying ``_sha2`` on every call (it is missing before
Python 3.12) went through the import machinery's path search each time --
several times the cost of hashing a cache key.
"""
from __future__ import annotations

from typing import Any, Callable

__all__ = ["blake2b", "sha1", "sha256"]

_impls: dict[str, Callable[..., Any]] = {}


def _sha256_impl() -> Callable[..., Any]:
    try:
        from _sha2 import sha256 as impl  # Python >= 3.12
    except ImportError:
        try:
            from _sha256 import sha256 as impl  # Python 3.11
        except ImportError:
            from hashlib import sha256 as impl
    return impl


def _sha1_impl() -> Callable[..., Any]:
    try:
        from _sha1 import sha1 as impl
    except ImportError:
        from hashlib import sha1 as impl
    return impl


def _blake2b_impl() -> Callable[..., Any]:
    try:
        from _blake2 import blake2b as impl
    except ImportError:
        from hashlib import blake2b as impl
    return impl


def sha256(data: bytes = b"") -> Any:
    """A SHA-256 hash object (``update``, ``digest``, ``hexdigest``)."""
    impl = _impls.get("sha256")
    if impl is None:
        impl = _impls["sha256"] = _sha256_impl()
    return impl(data)


def sha1(data: bytes = b"") -> Any:
    """A SHA-1 hash object."""
    impl = _impls.get("sha1")
    if impl is None:
        impl = _impls["sha1"] = _sha1_impl()
    return impl(data)


def blake2b(data: bytes = b"", digest_size: int = 64) -> Any:
    """A BLAKE2b hash object (``digest_size`` bytes), about twice as fast
    as SHA-256 on long inputs such as source files."""
    impl = _impls.get("blake2b")
    if impl is None:
        impl = _impls["blake2b"] = _blake2b_impl()
    return impl(data, digest_size=digest_size)
