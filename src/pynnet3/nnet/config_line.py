"""Kaldi's ConfigLine: ``first-token key=value key2=value with spaces ...``.

Values may contain spaces without quoting (``input=Append(a, b)``): a value
runs up to the whitespace before the next ``key=``.  ``key='a b'`` and
``key="a b"`` quote a value.  Each getter marks its key as used, so that after
a component has read its options, :meth:`ConfigLine.unused_values` lists the
options it did not understand (Kaldi errors on those).
"""
from __future__ import annotations

import re
from typing import Iterable

import numpy as np

from ..errors import ConfigError

_VALID_NAME = re.compile(r"^[A-Za-z_][-A-Za-z0-9_.]*$")

INT32_MIN, INT32_MAX = -(2 ** 31), 2 ** 31 - 1
# What strtoll accepts (base 10) with only whitespace around it: Kaldi's
# ConvertStringToInteger.  (Python's int() also takes "1_000" and non-ASCII
# digits, which Kaldi does not.)
_INT_TEXT = re.compile(r"^[ \t\n\r\v\f]*[+-]?[0-9]+[ \t\n\r\v\f]*$")
INT32_RANGE = f"{INT32_MIN} .. {INT32_MAX}"


def parse_int32(text: str) -> int | None:
    """Kaldi's ConvertStringToInteger<int32>: the value, or None when ``text``
    is not a whole decimal integer or is out of int32's range."""
    if not _INT_TEXT.match(text):
        return None
    value = int(text)
    if value < INT32_MIN or value > INT32_MAX:
        return None
    return value


# What libstdc++'s num_get accepts for a float, when the whole token is used.
_REAL_RE = re.compile(r"^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$")
# Kaldi's ConvertStringToReal falls back to these spellings (case-insensitive).
_INF_NAN = {
    "INF": float("inf"), "+INF": float("inf"), "-INF": float("-inf"),
    "INFINITY": float("inf"), "+INFINITY": float("inf"),
    "-INFINITY": float("-inf"), "NAN": float("nan"), "+NAN": float("nan"),
    "-NAN": float("nan"), "1.#INF": float("inf"), "-1.#INF": float("-inf"),
    "1.#QNAN": float("nan"), "-1.#QNAN": float("nan"),
}


def string_to_real(text: str) -> float | None:
    """Kaldi's ConvertStringToReal<float>: the float32 value, or None.

    Out-of-range values (which become +-inf in float32) fail, as in libstdc++.
    """
    if _REAL_RE.match(text):
        value = float(text)
        with np.errstate(over="ignore"):
            rounded = np.float32(value)
        if np.isinf(rounded):
            return None
        return float(rounded)
    return _INF_NAN.get(text.upper())


def int32_error_detail(text: str) -> str:
    """Why :func:`parse_int32` refused ``text``, for an error message."""
    if _INT_TEXT.match(text):
        return f"out of range (allowed range {INT32_RANGE})"
    return "expected an integer"


def is_valid_name(name: str) -> bool:
    """Kaldi's IsValidName: letter or _, then letters, digits, ``-``, ``_``, ``.``."""
    return bool(_VALID_NAME.match(name))


def is_token_name(name: str) -> bool:
    return bool(_VALID_NAME.match(name))


class ConfigLine:
    """One parsed config line.  ``source``/``line_number`` locate it for errors."""

    def __init__(self, line: str, source: str | None = None, line_number: int | None = None):
        self.whole_line = line
        self.source = source
        self.line_number = line_number
        self.first_token = ""
        # key -> [value, used]; the first occurrence of a key wins, as in Kaldi.
        self._data: dict[str, list] = {}
        self._parse(line)

    # -- parsing -----------------------------------------------------------
    def error(self, message: str) -> ConfigError:
        return ConfigError(message, self.source, self.line_number, self.whole_line)

    def _parse(self, line: str) -> None:
        size = len(line)
        pos = 0
        while pos < size and line[pos].isspace():
            pos += 1
        if pos == size:
            raise self.error("empty config line")
        start = pos
        while pos < size and not line[pos].isspace():
            if line[pos] == "=":
                pos = start
                break
            pos += 1
        self.first_token = line[start:pos]
        if self.first_token and not is_valid_name(self.first_token):
            raise self.error(f"invalid first token '{self.first_token}'")
        while pos < size:
            if line[pos].isspace():
                pos += 1
                continue
            eq = line.find("=", pos)
            if eq == pos or eq < 0:
                raise self.error(f"expected key=value, got '{line[pos:pos + 20]}'")
            key = line[pos:eq]
            if not is_valid_name(key):
                raise self.error(f"invalid option name '{key}'")
            if eq + 1 < size and line[eq + 1] in "'\"":
                quote = line[eq + 1]
                close = line.find(quote, eq + 2)
                if close < 0:
                    raise self.error(f"no matching quote {quote} for option '{key}'")
                value = line[eq + 2:close]
                pos = close + 1
            else:
                next_eq = line.find("=", eq + 1)
                end = size
                if next_eq >= 0:
                    space = max(line.rfind(" ", 0, next_eq), line.rfind("\t", 0, next_eq))
                    if space > eq:
                        end = space
                while end > 0 and line[end - 1].isspace():
                    end -= 1
                value = line[eq + 1:end]
                pos = end
            self._data.setdefault(key, [value, False])

    # -- access ----------------------------------------------------------
    def keys(self) -> list[str]:
        return list(self._data)

    def has(self, key: str) -> bool:
        return key in self._data

    def get_str(self, key: str, default: str | None = None) -> str | None:
        if key not in self._data:
            return default
        entry = self._data[key]
        entry[1] = True
        return entry[0]

    def require_str(self, key: str) -> str:
        value = self.get_str(key)
        if value is None:
            raise self.error(f"required option '{key}' is missing")
        return value

    def get_int(self, key: str, default: int | None = None) -> int | None:
        value = self.get_str(key)
        if value is None:
            return default
        # Kaldi's GetValue for an int32 fails on anything out of int32's range,
        # so a huge dimension is refused here, before anything is allocated.
        parsed = parse_int32(value)
        if parsed is None:
            raise self.error(f"option {key}={value}: {int32_error_detail(value)}")
        return parsed

    def require_int(self, key: str) -> int:
        v = self.get_int(key)
        if v is None:
            raise self.error(f"required option '{key}' is missing")
        return v

    def get_float(self, key: str, default: float | None = None) -> float | None:
        value = self.get_str(key)
        if value is None:
            return default
        # Kaldi's GetValue for a BaseFloat: a float32, out of its range fails.
        parsed = string_to_real(value.strip())
        if parsed is None:
            what = ("out of the range of a float" if _REAL_RE.match(value.strip())
                    else "expected a number")
            raise self.error(f"option {key}={value}: {what}")
        return parsed

    def require_float(self, key: str) -> float:
        v = self.get_float(key)
        if v is None:
            raise self.error(f"required option '{key}' is missing")
        return v

    def get_bool(self, key: str, default: bool | None = None) -> bool | None:
        value = self.get_str(key)
        if value is None:
            return default
        if value[:1] in ("t", "T"):
            return True
        if value[:1] in ("f", "F"):
            return False
        raise self.error(f"option {key}={value}: expected true or false")

    def get_int_list(self, key: str, default: list[int] | None = None) -> list[int] | None:
        """Comma- or space-separated integers (Kaldi's vector<int32> GetValue)."""
        value = self.get_str(key)
        if value is None:
            return default
        parts = [p for p in re.split(r"[,\s]+", value.strip()) if p]
        out = []
        for p in parts:
            parsed = parse_int32(p)
            if parsed is None:
                raise self.error(f"option {key}={value}: expected a list of integers "
                                 f"({p}: {int32_error_detail(p)})")
            out.append(parsed)
        return out

    def get_float_list(self, key: str, default: list[float] | None = None) -> list[float] | None:
        value = self.get_str(key)
        if value is None:
            return default
        parts = [p for p in re.split(r"[,\s:]+", value.strip()) if p]
        out = [string_to_real(p) for p in parts]
        if None in out:
            raise self.error(f"option {key}={value}: expected a list of numbers (each in the "
                             "range of a float)")
        return [v for v in out if v is not None]

    def unused_values(self) -> list[str]:
        return [f"{k}={v[0]}" for k, v in self._data.items() if not v[1]]

    def check_all_used(self, what: str) -> None:
        unused = self.unused_values()
        if unused:
            raise self.error(f"{what}: unrecognized option(s) {' '.join(unused)}")


def config_bytes(text: str | bytes) -> bytes:
    """A config as the bytes Kaldi sees.  Text that came from a command line
    or a file decoded with ``surrogateescape`` turns back into its bytes."""
    if isinstance(text, bytes):
        return text
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        # Lone surrogates that are not escaped bytes: keep them as the
        # (invalid UTF-8) bytes they are, so that they are reported below.
        return text.encode("utf-8", "surrogatepass")


def decode_config_line(raw: bytes, source: str, line_number: int, column: int = 1) -> str:
    """The text of one config line with its comment already removed.

    Kaldi reads configs as bytes, so any byte is fine in a comment; outside
    one pynnet3 needs UTF-8 (names, numbers and descriptors are ASCII anyway),
    and names the first offending byte and its 1-based column (``column`` is
    that of ``raw[0]`` in the file's line).
    """
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"byte 0x{raw[e.start]:02x} at column {column + e.start} is not "
                          "valid UTF-8 text (bytes that are not UTF-8 are allowed only in "
                          "comments)", source, line_number) from None


def read_config_lines(text: str | bytes, source: str) -> list[tuple[int, str]]:
    """Kaldi's ReadConfigLines: drop comments (``#`` onwards) and blank lines.

    Returns (1-based line number, line) pairs so that later errors can point
    at the line.  ``text`` may be the file's bytes: a comment may hold any
    bytes (Latin-1 accents, say); the rest of a line must be UTF-8.
    """
    out: list[tuple[int, str]] = []
    for i, raw in enumerate(config_bytes(text).splitlines(), start=1):
        content = raw.split(b"#", 1)[0]
        stripped = content.lstrip()
        start = len(content) - len(stripped)
        stripped = stripped.rstrip()
        if stripped:
            out.append((i, decode_config_line(stripped, source, i, start + 1)))
    return out


def parse_config_lines(lines: Iterable[tuple[int, str]], source: str) -> list[ConfigLine]:
    return [ConfigLine(line, source, num) for num, line in lines]
