"""Protocol-buffer messages as trees of fields, without a schema, for structure-aware mutation.

A message is a list of :class:`Field`; a length-delimited value that itself parses as a
message (every byte consumed, sane field numbers) is kept as a sub-tree so that mutations deep
inside a record come out with every enclosing length recomputed. Anything that does not parse
stays bytes. ``serialize(parse(b)) == b`` for every message this module reads (the tests check
it), so an unmutated tree round-trips exactly.
"""

from __future__ import annotations

import dataclasses

VARINT, FIXED64, LEN, FIXED32 = 0, 1, 2, 5
# Field numbers the tf.train / TensorProto messages use are small; a "message" whose fields are
# numbered higher is far more likely to be a string or a packed block that happens to parse.
_MAX_FIELD = 64
_MAX_DEPTH = 12


@dataclasses.dataclass
class Field:
    """One field: its number, wire type and value (an int, bytes or a sub-message)."""

    number: int
    wire: int
    value: int | bytes | list[Field]


def write_varint(out: bytearray, value: int) -> None:
    """Appends ``value`` (taken mod 2**64) as a varint."""
    value &= (1 << 64) - 1
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def varint(value: int) -> bytes:
    """``value`` as varint bytes."""
    out = bytearray()
    write_varint(out, value)
    return bytes(out)


def read_varint(buf: bytes, pos: int) -> tuple[int, int] | None:
    """``(value, new_pos)``, or None for a varint that runs off the end or past 10 bytes."""
    value = shift = 0
    for i in range(10):
        if pos + i >= len(buf):
            return None
        b = buf[pos + i]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value & ((1 << 64) - 1), pos + i + 1
        shift += 7
    return None


def _parse(buf: bytes, depth: int) -> list[Field] | None:
    fields: list[Field] = []
    pos = 0
    while pos < len(buf):
        key = read_varint(buf, pos)
        if key is None:
            return None
        k, pos = key
        number, wire = k >> 3, k & 7
        if number == 0 or number > _MAX_FIELD or varint(k) != buf[pos - len(varint(k)) : pos]:
            return None  # also refuses over-long (non-canonical) keys, which would not round-trip
        if wire == VARINT:
            v = read_varint(buf, pos)
            if v is None or varint(v[0]) != buf[pos : v[1]]:
                return None
            fields.append(Field(number, wire, v[0]))
            pos = v[1]
        elif wire in (FIXED64, FIXED32):
            n = 8 if wire == FIXED64 else 4
            if pos + n > len(buf):
                return None
            fields.append(Field(number, wire, int.from_bytes(buf[pos : pos + n], "little")))
            pos += n
        elif wire == LEN:
            length = read_varint(buf, pos)
            if length is None or varint(length[0]) != buf[pos : length[1]]:
                return None
            n, pos = length
            if pos + n > len(buf):
                return None
            body = buf[pos : pos + n]
            pos += n
            sub = _parse(body, depth + 1) if body and depth < _MAX_DEPTH else None
            fields.append(Field(number, wire, sub if sub is not None else body))
        else:
            return None
    return fields


def parse(buf: bytes) -> list[Field] | None:
    """The message in ``buf`` as a tree, or None when it does not parse as one."""
    return _parse(bytes(buf), 0)


def serialize(fields: list[Field]) -> bytes:
    """The bytes of a message tree (lengths recomputed)."""
    out = bytearray()
    _write(out, fields)
    return bytes(out)


def _write(out: bytearray, fields: list[Field]) -> None:
    for f in fields:
        write_varint(out, (f.number << 3) | (f.wire & 7))
        if f.wire == VARINT:
            write_varint(out, int(f.value))  # type: ignore[arg-type]
        elif f.wire == FIXED64:
            out += (int(f.value) & ((1 << 64) - 1)).to_bytes(8, "little")  # type: ignore[arg-type]
        elif f.wire == FIXED32:
            out += (int(f.value) & 0xFFFFFFFF).to_bytes(4, "little")  # type: ignore[arg-type]
        elif f.wire == LEN:
            if isinstance(f.value, list):
                body = serialize(f.value)
            elif isinstance(f.value, int):
                body = varint(f.value)
            else:
                body = bytes(f.value)
            write_varint(out, len(body))
            out += body
        # Groups (3, 4) and the invalid wire types 6, 7: the key alone.


def walk(fields: list[Field]) -> list[tuple[list[Field], int]]:
    """Every field of the tree as ``(the list holding it, its index)``, depth first."""
    out: list[tuple[list[Field], int]] = []
    for i, f in enumerate(fields):
        out.append((fields, i))
        if isinstance(f.value, list):
            out.extend(walk(f.value))
    return out
