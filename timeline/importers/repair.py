r"""Repair of malformed trace JSON seen in the wild, where that is safe.

Takes the bytes of a JSON document that failed to decode and gives back repaired bytes with one
counted warning per kind of repair, or raises :class:`TraceFormatError` at ``FILE:LINE:COL``.

What is repaired (each fix is local, and the same damaged line elsewhere in the file gets the same
fix in the same pass, so a python_function name with unescaped quotes repeated 10,000 times costs one
pass):

- unescaped ``"`` inside a string (python_function names) → escaped;
- raw control characters inside a string → ``\\u00XX`` escapes;
- bare ``N/A``, ``NaN``, ``Infinity``, ``undefined``, ``None`` values → ``null``;
- Windows paths with single backslashes → doubled backslashes;
- a file cut off mid-record (a killed process, a ``.tmp`` left by a crash) → closed after the last
  complete event, the partial event dropped;
- bytes after the end of the document (log lines appended) → dropped;
- numbers beyond the range of a double (``1e400``) → ``null`` (the event then has no time, and is
  dropped and counted like one without);
- invalid UTF-8 → replacement characters.

Anything else is reported with its position rather than guessed at.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field

import msgspec

from timeline.errors import TraceFormatError, position_of

__all__ = ["HUGE_NUMBERS", "INVALID_UTF8", "Repaired", "nesting_error", "repair_json", "replace_huge_numbers"]

HUGE_NUMBERS = "numbers out of range replaced by null"
"""What :func:`replace_huge_numbers` repairs, as the warnings name it."""
INVALID_UTF8 = "invalid UTF-8 sequences replaced"
"""The repair of invalid UTF-8, as the warnings name it."""

_MAX_PASSES = 400
_MAX_TRUNCATION_TRIES = 64
_BARE_VALUES = re.compile(rb"(N/A|-?NaN|-?Infinity|-?nan|-?inf|undefined|None)\b|N/A")
_POSITION = re.compile(r"\(byte (\d+)\)")
# A number with an exponent, or a fraction after 309 digits, where a value is (after ":", "," or "[",
# before ",", "]" or "}"): the only numbers that can be beyond a double. Ints of any size decode.
_HUGE_NUMBER = re.compile(rb"([:,\[]\s*)(-?(?:\d+(?:\.\d*)?[eE]\+?\d+|\d{309,}\.\d*))(?=\s*[,\]}])")


class _Skip(msgspec.Struct):
    """Decoding into a struct without fields validates JSON syntax without building objects."""


_VALIDATOR = msgspec.json.Decoder(_Skip)
_GENERIC = msgspec.json.Decoder()


@dataclass
class Repaired:
    """Repaired JSON bytes and the counted warnings that say what was changed."""

    data: bytes
    warnings: list[str] = field(default_factory=list)


def nesting_error(source: str) -> TraceFormatError:
    """Return the error for JSON nested deeper than the decoder goes (about 1,000 levels)."""
    return TraceFormatError(
        f"{source}: JSON nested too deep (arrays or objects about 1,000 levels inside one another); "
        "not a trace a profiler writes: check what wrote this file"
    )


def replace_huge_numbers(data: bytes, *, source: str) -> tuple[bytes, int]:
    """Replace the numbers beyond the range of a double (``1e400``) by ``null``; return how many.

    The text keeps its length (``null`` is padded with blanks to the number's length), so positions
    found in it are positions in ``data``.

    Raises
    ------
    TraceFormatError
        None found where the decoder met one (inside an odd construct): not repaired.
    """
    count = 0

    def replace(match: re.Match[bytes]) -> bytes:
        nonlocal count
        if not math.isinf(float(match.group(2))):
            return match.group(0)
        count += 1
        # as long as the number (at least 5 bytes: 1e309), so that later byte offsets stay where they were
        return match.group(1) + b"null".ljust(len(match.group(2)))

    fixed = _HUGE_NUMBER.sub(replace, data)
    if not count:
        msg = f"{source}: a number beyond 1.8e308 that cannot be repaired safely; fix the writer of this file"
        raise TraceFormatError(msg)
    return fixed, count


def _error_of(data: bytes) -> tuple[str, int] | None:
    """Return (message, byte offset) of the first syntax error, or None if ``data`` is valid JSON.

    Raises
    ------
    RecursionError
        Nested too deep to check.
    """
    try:
        _VALIDATOR.decode(data)
    except msgspec.ValidationError:
        return None  # syntax is fine; the top level is not an object (the caller reports that)
    except msgspec.DecodeError as exc:
        message = str(exc)
        match = _POSITION.search(message)
        return message, int(match.group(1)) if match else len(data)
    return None


def _line_bounds(data: bytes, offset: int) -> tuple[int, int]:
    start = data.rfind(b"\n", 0, offset) + 1
    end = data.find(b"\n", offset)
    return start, len(data) if end < 0 else end


def _replace_line(data: bytes, offset: int, fixed_line: bytes) -> tuple[bytes, int]:
    """Replace the line holding ``offset`` by ``fixed_line`` everywhere it occurs; return the count."""
    start, end = _line_bounds(data, offset)
    line = data[start:end]
    if len(line) < 24:  # too short to be a unique record line: fix this occurrence only
        return data[:start] + fixed_line + data[end:], 1
    return data.replace(line, fixed_line), data.count(line)


def _close_truncated(data: bytes) -> bytes | None:
    """Return ``data`` closed after its last complete event, or None if no cut point works."""
    tries = 0
    end = len(data)
    while tries < _MAX_TRUNCATION_TRIES:
        cut = max(data.rfind(b"}", 0, end), data.rfind(b"]", 0, end))
        if cut < 0:
            return None
        for suffix in (b"]}", b"}", b"]}}", b"}]}"):
            candidate = data[: cut + 1] + suffix
            if _error_of(candidate) is None:
                return candidate
        tries += 1
        end = cut
    return None


def repair_json(data: bytes, *, source: str) -> Repaired:
    """Repair a malformed JSON document where that is safe.

    Parameters
    ----------
    data
        The whole (decompressed) file content.
    source
        The file name used in messages.

    Returns
    -------
    Repaired
        Bytes that decode as JSON, and one warning per kind of repair with its count.

    Raises
    ------
    TraceFormatError
        ``FILE:LINE:COL: what`` when the damage cannot be repaired safely.
    """
    try:
        return _repair(data, source)
    except RecursionError:
        raise nesting_error(source) from None


def _repair(data: bytes, source: str) -> Repaired:
    counts: Counter[str] = Counter()
    work = data
    # The first error met on each line, where the file's own damage is: a fix that guessed wrong
    # (a missing comma taken for an unescaped quote) fails further on, at a position the file never had.
    # Fixes keep line numbers and the columns before the first fix on a line.
    first_on_line: dict[int, tuple[int, str]] = {}
    for _ in range(_MAX_PASSES):
        error = _error_of(work)
        if error is None:
            break
        message, offset = error
        line, col = position_of(work, offset)
        col, first_message = first_on_line.setdefault(line, (col, message))
        fixed = _fix(work, offset, message, counts)
        if fixed is None or fixed == work:
            detail = first_message.replace("JSON is malformed: ", "").split(" (byte")[0]
            detail = detail[:1].lower() + detail[1:]  # msgspec writes "Input data was truncated"
            msg = f"{source}:{line}:{col}: {detail}; the file is not valid JSON and cannot be repaired safely"
            if data.lstrip()[:1] not in (b"{", b"["):
                msg = (
                    f"{source}:{line}:{col}: not JSON ({detail}); expected a PyTorch profiler trace "
                    "(.json or .json.gz) or a Horovod timeline"
                )
            raise TraceFormatError(msg)
        work = fixed
    else:
        last = _error_of(work)
        line, col = position_of(work, last[1] if last else 0)
        msg = (
            f"{source}:{line}:{col}: too many malformed records to repair safely; fix the writer of this file"
        )
        raise TraceFormatError(msg)
    work = _fix_values(work, source, counts)
    warnings = [f"{source}: repaired malformed JSON: {what} ({n})" for what, n in sorted(counts.items())]
    return Repaired(work, warnings)


def _fix_values(work: bytes, source: str, counts: Counter[str]) -> bytes:
    """Repair what valid JSON syntax may still hold: numbers beyond a double, invalid UTF-8."""
    for _ in range(3):
        try:
            _GENERIC.decode(work)
        except msgspec.ValidationError:  # a number beyond a double (1e400)
            work, n = replace_huge_numbers(work, source=source)
            counts[HUGE_NUMBERS] += n
            continue
        except (msgspec.DecodeError, UnicodeDecodeError):  # msgspec raises the latter for invalid UTF-8
            text = work.decode("utf-8", errors="replace")
            # every replacement character that was not already in the file is one invalid sequence
            replaced = text.count("\ufffd") - work.count("\ufffd".encode())
            counts[INVALID_UTF8] += max(1, replaced)
            work = text.encode("utf-8")
            continue
        break
    return work


def _fix(work: bytes, offset: int, message: str, counts: Counter[str]) -> bytes | None:
    """Apply one local fix at ``offset``; return the new bytes or None when nothing safe applies."""
    if "truncated" in message:
        closed = _close_truncated(work)
        if closed is None:
            return None
        counts["file cut off mid-record, closed after the last complete event"] += 1
        return closed
    if "trailing characters" in message:
        # msgspec reports the byte after the first trailing character: the document ends before it.
        cut = offset - 1 if offset > 0 and _error_of(work[: offset - 1]) is None else offset
        counts["bytes after the end of the document dropped"] += len(work) - cut
        return work[:cut]
    start, end = _line_bounds(work, offset)
    line = work[start:end]
    at = offset - start
    if "invalid character" in message:
        bare = _BARE_VALUES.match(line, at)
        if bare is not None:
            counts["bare N/A/NaN/Infinity values replaced by null"] += 1
            fixed_line = line[:at] + b"null" + line[bare.end() :]
            new, n = _replace_line(work, offset, fixed_line)
            counts["bare N/A/NaN/Infinity values replaced by null"] += n - 1
            return new
        if at < len(line) and line[at] < 0x20:
            what = "control characters in strings escaped"
            fixed_line = line[:at] + b"\\u%04x" % line[at] + line[at + 1 :]
            new, n = _replace_line(work, offset, fixed_line)
            counts[what] += n
            return new
        if at >= len(line) and offset < len(work) and work[offset] < 0x20:
            # a raw newline inside a string: the line ends there
            counts["control characters in strings escaped"] += 1
            return work[:offset] + b"\\u%04x" % work[offset] + work[offset + 1 :]
        return None
    if "invalid escaped character" in message:
        backslash = line.rfind(b"\\", 0, at + 1)
        if backslash < 0:
            return None
        fixed_line = line[:backslash] + b"\\\\" + line[backslash + 1 :]
        new, n = _replace_line(work, offset, fixed_line)
        counts["single backslashes (Windows paths) doubled"] += n
        return new
    if message.startswith("JSON is malformed: expected ','") or "expected ':'" in message:
        # A string ended early at an unescaped quote: escape the last quote before the error.
        quote = line.rfind(b'"', 0, at)
        if quote <= 0 or line[quote - 1 : quote] == b"\\":
            return None
        fixed_line = line[:quote] + b'\\"' + line[quote + 1 :]
        new, n = _replace_line(work, offset, fixed_line)
        counts["unescaped quotes in strings escaped"] += n
        return new
    return None
