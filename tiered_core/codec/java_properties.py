"""Java ``.properties`` text (RocketMQ's ``broker.conf``), as ``java.util.Properties`` reads it.

Not to be confused with a message's properties (``key\\x01value\\x02``), which
:func:`tiered_core.codec.message.parse_properties` reads.
"""

from __future__ import annotations

import re


def parse_java_properties(text: str) -> dict[str, str]:
    """Java ``.properties`` text -> ordered key/value strings (the last of duplicate keys wins).

    Handles ``#``/``!`` comments, ``=``, ``:`` or whitespace separators, backslash line
    continuations and escapes (``\\\\``, ``\\t``, ``\\n``, ``\\uXXXX``), as broker.conf is read.
    ``\\uXXXX`` escapes are UTF-16 code units as in Java: a surrogate pair of escapes is one
    character; a lone surrogate is kept as Java keeps it (the loader refuses it in a value).
    """
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.lstrip(" \t\f")
        if not pending and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:  # an odd number of backslashes continues the line
            pending += line[:-1]
            continue
        logical.append(pending + line)
        pending = ""
    if pending:
        logical.append(pending)
    out: dict[str, str] = {}
    for line in logical:
        key_chars: list[str] = []
        i, n = 0, len(line)
        while i < n:
            ch = line[i]
            if ch == "\\" and i + 1 < n:
                key_chars.append("\\" + line[i + 1])
                i += 2
                continue
            if ch in "=: \t\f":
                break
            key_chars.append(ch)
            i += 1
        while i < n and line[i] in " \t\f":
            i += 1
        if i < n and line[i] in "=:":
            i += 1
            while i < n and line[i] in " \t\f":
                i += 1
        out[_unescape("".join(key_chars))] = _unescape(line[i:])
    return out


def _unescape(text: str) -> str:
    if "\\" not in text:
        return _utf16_pairs(text)
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch != "\\" or i + 1 == n:
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[i + 2:i + 6]):
            out.append(chr(int(text[i + 2:i + 6], 16)))
            i += 6
            continue
        out.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(nxt, nxt))
        i += 2
    return _utf16_pairs("".join(out))


def _utf16_pairs(text: str) -> str:
    """Join surrogate pairs into one character: \\uXXXX escapes are UTF-16 code units, as in
    Java (\\uD83D\\uDE00 is U+1F600). A lone surrogate stays (Java keeps it); the field
    checks refuse it."""
    if any("\ud800" <= ch <= "\udfff" for ch in text):
        return text.encode("utf-16-be", "surrogatepass").decode("utf-16-be", "surrogatepass")
    return text


__all__ = ["parse_java_properties"]
