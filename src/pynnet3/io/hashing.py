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


def sha256(data: bytes = b"") -> Any:
    """A SHA-256 hash object (``update``, ``digest``, ``hexdigest``)."""
    try:
        from _sha2 import sha256 as impl  # Python >= 3.12
    except ImportError:
        try:
            from _sha256 import sha256 as impl  # Python 3.11
        except ImportError:
            from hashlib import sha256 as impl
    return impl(data)


def sha1(data: bytes = b"") -> Any:
    """A SHA-1 hash object."""
    try:
        from _sha1 import sha1 as impl
    except ImportError:
        from hashlib import sha1 as impl
    return impl(data)
