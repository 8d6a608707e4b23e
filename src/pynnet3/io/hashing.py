"""SHA-1 and SHA-256 without OpenSSL.

``import hashlib`` loads OpenSSL's libcrypto (through ``_hashlib``), which
adds about 3.5 MB to the resident memory of every process that imports it.
pynnet3 hashes only short keys and its own source (the computation cache's
keys, long temporary-file names), for which CPython's built-in
implementations are as good; they give the same digests.  hashlib is the
fallback where those modules are missing.
"""
from __future__ import annotations

from typing import Any

__all__ = ["sha1", "sha256"]


# The implementations, found on first use (a failed import is not memoised by
# Python: retrying ``_sha2`` on 3.11 at every call cost ~0.15 ms, a twentieth
# of a small network's compile, which hashes three times).
_IMPL: dict[str, Any] = {}


def _sha256_impl() -> Any:
    try:
        from _sha2 import sha256 as impl  # Python >= 3.12
    except ImportError:
        try:
            from _sha256 import sha256 as impl  # Python 3.11
        except ImportError:
            from hashlib import sha256 as impl
    return impl


def _sha1_impl() -> Any:
    try:
        from _sha1 import sha1 as impl
    except ImportError:
        from hashlib import sha1 as impl
    return impl


def sha256(data: bytes = b"") -> Any:
    """A SHA-256 hash object (``update``, ``digest``, ``hexdigest``)."""
    impl = _IMPL.get("sha256")
    if impl is None:
        impl = _IMPL["sha256"] = _sha256_impl()
    return impl(data)


def sha1(data: bytes = b"") -> Any:
    """A SHA-1 hash object."""
    impl = _IMPL.get("sha1")
    if impl is None:
        impl = _IMPL["sha1"] = _sha1_impl()
    return impl(data)
