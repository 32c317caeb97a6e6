"""Whole input files read by parsers outside this package (labels, an inventory, a NAB
label set): what those parsers let through, turned into :class:`BadInputError` naming the
file (and the line, where the damage says where it is).

A file that is not UTF-8, JSON nested past the interpreter's recursion limit, a folder where a
file was expected, an integer too large for a float: each is bad input (exit 2), not an
internal error with a traceback (exit 1).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from noc_assistant.errors import BadInputError

__all__ = ["READ_ERRORS", "bad_input", "reading"]

#: what reading and parsing a whole file may raise that is not already a BadInputError
READ_ERRORS = (UnicodeDecodeError, RecursionError, OSError, OverflowError)


def bad_input(source: str, exc: BaseException) -> BadInputError:
    """The :class:`BadInputError` for ``exc`` (one of :data:`READ_ERRORS`) raised reading
    ``source``.

    >>> err = UnicodeDecodeError("utf-8", b'{"a":\\n "\\xe9"}', 8, 9, "invalid start byte")
    >>> str(bad_input("labels.json", err))
    'labels.json:2: not UTF-8 (invalid start byte at byte 8)'
    >>> str(bad_input("inv.json", RecursionError("maximum recursion depth exceeded")))
    'inv.json: nested too deeply to read'
    """
    if isinstance(exc, UnicodeDecodeError):
        data = exc.object
        line = bytes(data[: exc.start]).count(b"\n") + 1
        return BadInputError(
            f"not UTF-8 ({exc.reason} at byte {exc.start})", source=source, line=line
        )
    if isinstance(exc, RecursionError):
        return BadInputError("nested too deeply to read", source=source)
    if isinstance(exc, IsADirectoryError):
        return BadInputError("is a folder, not a file", source=source)
    if isinstance(exc, OSError):
        return BadInputError(f"cannot read: {exc.strerror or exc}", source=source)
    return BadInputError(f"a number out of range: {exc}", source=source)


@contextmanager
def reading(source: str) -> Iterator[None]:
    """Within the block, :data:`READ_ERRORS` become :func:`bad_input` naming ``source``.

    >>> with reading("labels.json"):
    ...     open("/").read()
    Traceback (most recent call last):
    ...
    noc_assistant.errors.BadInputError: labels.json: is a folder, not a file
    """
    try:
        yield
    except READ_ERRORS as exc:
        raise bad_input(source, exc) from None
