"""Mutations: byte-level havoc, protobuf trees, TFRecord frames (CRCs recomputed), images.

Every function takes a :class:`random.Random` and returns new bytes; nothing here imports the
code under test except :func:`jaxrec._native.masked_crc32c`, which frames records the way a
writer does so that mutated records reach the parser instead of stopping at a CRC check.

The structure-aware layers are what find parser bugs quickly: a byte flip inside an Example
almost always breaks an enclosing length, while a tree mutation keeps every length right and
changes one value, splits a packed list into two runs, unpacks it, duplicates or retypes a
field; a TFRecord mutation re-frames the mutated payload with valid CRCs, or edits a length
field and recomputes the header CRC so the lie reaches the reader's bounds checks.
"""

from __future__ import annotations

import gzip
import random
import struct
import zlib

from jaxrec import _native

from . import proto

INTERESTING_INTS = [
    0,
    1,
    2,
    3,
    7,
    8,
    63,
    64,
    127,
    128,
    255,
    256,
    0x7FFF,
    0x8000,
    0xFFFF,
    0x10000,
    2**31 - 1,
    2**31,
    2**32 - 1,
    2**32,
    2**40,
    2**53,
    2**62,
    2**63 - 1,
    2**63,
    2**64 - 1,
    2**64 - 2,
]
INTERESTING_BYTES = [0x00, 0x01, 0x02, 0x7F, 0x80, 0x81, 0xFE, 0xFF]


def _splice_source(rng: random.Random, others: list[bytes]) -> bytes:
    return rng.choice(others) if others else b""


def havoc(rng: random.Random, data: bytes, others: list[bytes] = (), rounds: int = 0) -> bytes:
    """Byte-level mutations, 1 to 4 stacked: flips, interesting bytes and ints, inserted and
    deleted runs, duplicated slices, splices with ``others`` and truncation."""
    buf = bytearray(data)
    for _ in range(rounds or rng.choice((1, 1, 1, 2, 2, 3, 4))):
        op = rng.randrange(11)
        n = len(buf)
        if op == 0 and n:
            i = rng.randrange(n)
            buf[i] ^= 1 << rng.randrange(8)
        elif op == 1 and n:
            buf[rng.randrange(n)] = rng.choice(INTERESTING_BYTES + [rng.randrange(256)])
        elif op == 2 and n >= 2:
            width = rng.choice((2, 4, 8))
            if n >= width:
                i = rng.randrange(n - width + 1)
                v = rng.choice(INTERESTING_INTS) & ((1 << (8 * width)) - 1)
                buf[i : i + width] = v.to_bytes(width, rng.choice(("little", "big")))
        elif op == 3:
            i = rng.randrange(n + 1)
            k = rng.choice((1, 2, 4, 8, 16, 64, 300))
            run = (
                bytes(rng.randrange(256) for _ in range(k))
                if rng.random() < 0.5
                else bytes([rng.choice(INTERESTING_BYTES)]) * k
            )
            buf[i:i] = run
        elif op == 4 and n:
            i = rng.randrange(n)
            del buf[i : i + rng.choice((1, 2, 4, 16, 64))]
        elif op == 5 and n:
            i = rng.randrange(n)
            j = min(n, i + rng.choice((1, 4, 16, 64, 256)))
            at = rng.randrange(n + 1)
            buf[at:at] = buf[i:j]
        elif op == 6 and others:
            other = _splice_source(rng, others)
            cut = rng.randrange(n + 1)
            buf = buf[:cut] + other[rng.randrange(len(other) + 1) :]
        elif op == 7 and n:
            del buf[rng.randrange(n) :]
        elif op == 8 and n:
            # A varint-looking run: continuation bits, the way a broken length reads.
            i = rng.randrange(n)
            k = rng.choice((1, 2, 5, 9, 10, 11))
            buf[i : i + k] = bytes([0x80 | rng.randrange(128) for _ in range(k - 1)] + [1])
        elif op == 9 and n:
            i = rng.randrange(n)
            buf[i : i + 1] = proto.varint(rng.choice(INTERESTING_INTS))
        elif n:
            i = rng.randrange(n)
            j = min(n, i + rng.choice((2, 8, 32)))
            buf[i:j] = bytes(reversed(buf[i:j]))
    return bytes(buf)


# ---------------------------------------------------------------------------------------------
# Protobuf trees


def _as_varints(body: bytes) -> list[int] | None:
    out, pos = [], 0
    while pos < len(body):
        v = proto.read_varint(body, pos)
        if v is None:
            return None
        out.append(v[0])
        pos = v[1]
    return out


def _mutate_field(rng: random.Random, holder: list[proto.Field], i: int, others: list[bytes]):
    f = holder[i]
    op = rng.randrange(14)
    if op == 0 and f.wire == proto.VARINT:
        v = int(f.value)  # type: ignore[arg-type]
        f.value = rng.choice(INTERESTING_INTS + [v + 1, max(v - 1, 0), (-v) & (2**64 - 1)])
    elif op == 1 and f.wire in (proto.FIXED32, proto.FIXED64):
        f.value = rng.choice(
            INTERESTING_INTS + [0x7F800000, 0x7FC00000, 0xFF800000, 0x80000000, rng.getrandbits(64)]
        )
    elif op == 2 and f.wire == proto.LEN:
        body = proto.serialize(f.value) if isinstance(f.value, list) else bytes(f.value)  # type: ignore[arg-type]
        if body.startswith((b"\x89PNG", b"\xff\xd8")):
            f.value = image(rng, body)
        else:
            f.value = havoc(rng, body, others)
    elif op == 3 and f.wire == proto.LEN and not isinstance(f.value, list):
        # Split one length-delimited value (a packed list, a string) into two runs of the same
        # field: protobuf reads two packed runs as one list.
        body = bytes(f.value)  # type: ignore[arg-type]
        if len(body) >= 2:
            cut = rng.randrange(1, len(body))
            if len(body) % 4 == 0 and rng.random() < 0.6:
                cut = 4 * rng.randrange(1, len(body) // 4) if len(body) >= 8 else cut
            holder[i : i + 1] = [
                proto.Field(f.number, f.wire, body[:cut]),
                proto.Field(f.number, f.wire, body[cut:]),
            ]
    elif op == 4 and f.wire == proto.LEN and not isinstance(f.value, list):
        # Unpack a packed block: one fixed32 or varint field per value (mixed with the rest).
        body = bytes(f.value)  # type: ignore[arg-type]
        varints = _as_varints(body)
        if len(body) % 4 == 0 and (varints is None or rng.random() < 0.5):
            vals = [
                proto.Field(f.number, proto.FIXED32, v) for (v,) in struct.iter_unpack("<I", body)
            ]
        elif varints is not None:
            vals = [proto.Field(f.number, proto.VARINT, v) for v in varints]
        else:
            vals = []
        if vals:
            k = rng.randrange(len(vals) + 1)  # keep a packed prefix sometimes
            if k:
                prefix = body[: 4 * k] if vals[0].wire == proto.FIXED32 else None
                if prefix is None:
                    prefix = b"".join(proto.varint(int(v.value)) for v in vals[:k])  # type: ignore[arg-type]
                vals = [proto.Field(f.number, proto.LEN, prefix)] + vals[k:]
            holder[i : i + 1] = vals
    elif op == 5:
        holder.insert(rng.randrange(len(holder) + 1), _copy(f))
    elif op == 6:
        del holder[i]
    elif op == 7 and len(holder) > 1:
        j = rng.randrange(len(holder))
        holder[i], holder[j] = holder[j], holder[i]
    elif op == 8:
        f.number = rng.choice((0, 1, 2, 3, 4, 5, 8, 15, 16, 2**29 - 1, rng.randrange(1, 20)))
    elif op == 9:
        _retype(rng, f)
    elif op == 10:
        holder.insert(rng.randrange(len(holder) + 1), _random_field(rng))
    elif op == 11 and f.wire == proto.LEN and others:
        donor = proto.parse(rng.choice(others))
        if donor:
            pick = rng.choice(proto.walk(donor))
            holder[i] = _copy(pick[0][pick[1]])
    elif op == 12 and f.wire == proto.VARINT:
        # Pack loose varints of the same number that follow into one block.
        run = [g for g in holder[i:] if g.number == f.number and g.wire == proto.VARINT]
        body = b"".join(proto.varint(int(g.value)) for g in run)  # type: ignore[arg-type]
        holder[i : i + 1] = [proto.Field(f.number, proto.LEN, body)]
    elif f.wire == proto.LEN and isinstance(f.value, list) and rng.random() < 0.5:
        f.value = havoc(rng, proto.serialize(f.value), others)
    else:
        f.value = rng.choice(INTERESTING_INTS) if f.wire != proto.LEN else b""


def _copy(f: proto.Field) -> proto.Field:
    if isinstance(f.value, list):
        return proto.Field(f.number, f.wire, [_copy(g) for g in f.value])
    return proto.Field(f.number, f.wire, f.value)


def _retype(rng: random.Random, f: proto.Field) -> None:
    wire = rng.choice((proto.VARINT, proto.FIXED64, proto.LEN, proto.FIXED32, 3, 4, 6, 7))
    if wire in (3, 4, 6, 7):  # groups and invalid wire types: keep a varint value to write
        f.wire, f.value = wire, 0
        return
    if wire == proto.LEN:
        f.value = (
            proto.varint(int(f.value)) if isinstance(f.value, int) else f.value  # type: ignore[arg-type]
        )
    elif not isinstance(f.value, int):
        f.value = rng.choice(INTERESTING_INTS)
    f.wire = wire


def _random_field(rng: random.Random) -> proto.Field:
    wire = rng.choice((proto.VARINT, proto.FIXED64, proto.LEN, proto.FIXED32))
    number = rng.choice((1, 2, 3, 4, 5, 6, 7, 8, 10, rng.randrange(1, 40)))
    if wire == proto.LEN:
        return proto.Field(number, wire, bytes(rng.randrange(256) for _ in range(rng.randrange(9))))
    return proto.Field(number, wire, rng.choice(INTERESTING_INTS))


def message(rng: random.Random, data: bytes, others: list[bytes] = ()) -> bytes:
    """A protobuf message mutated as a tree (1 to 3 edits, lengths recomputed); bytes that do
    not parse as a message get :func:`havoc` instead. One time in ten the serialized tree
    also gets a byte-level edit, so that lengths lie too."""
    tree = proto.parse(data) if len(data) <= 1 << 16 else None
    if not tree:
        return havoc(rng, data, others)
    for _ in range(rng.choice((1, 1, 2, 3))):
        sites = proto.walk(tree)
        if not sites:
            break
        holder, i = rng.choice(sites)
        _mutate_field(rng, holder, i, others)
    out = proto.serialize(tree)
    if rng.random() < 0.1:
        out = havoc(rng, out, others, rounds=1)
    return out


# ---------------------------------------------------------------------------------------------
# TFRecord files

_HEADER = struct.Struct("<QI")


def frame(payload: bytes) -> bytes:
    """One record as a writer frames it: length, its masked CRC, the payload, its masked CRC."""
    length = struct.pack("<Q", len(payload))
    return (
        length
        + struct.pack("<I", _native.masked_crc32c(length))
        + payload
        + struct.pack("<I", _native.masked_crc32c(payload))
    )


def unframe(data: bytes) -> tuple[list[bytes], bytes] | None:
    """``(payloads, trailing bytes)`` of well-framed data (CRCs not checked), else None."""
    out, pos = [], 0
    while pos + 12 <= len(data):
        (length,) = struct.unpack_from("<Q", data, pos)
        end = pos + 12 + length + 4
        if end > len(data):
            break
        out.append(data[pos + 12 : pos + 12 + length])
        pos = end
    return out, data[pos:]


def decompress(data: bytes, compression: str) -> bytes | None:
    """The plain stream of a GZIP / ZLIB / plain file, or None if it does not decompress."""
    try:
        if compression == "GZIP":
            return gzip.decompress(data)
        if compression == "ZLIB":
            return zlib.decompress(data)
    except (OSError, zlib.error, EOFError):
        return None
    return data


def compress(data: bytes, compression: str, rng: random.Random) -> bytes:
    """``data`` compressed as ``compression`` ("GZIP", "ZLIB" or "" for plain)."""
    level = rng.choice((0, 1, 6, 9))
    if compression == "GZIP":
        return gzip.compress(data, compresslevel=level, mtime=0)
    if compression == "ZLIB":
        return zlib.compress(data, level)
    return data


def record_file(
    rng: random.Random, data: bytes, compression: str, others: list[bytes] = ()
) -> bytes:
    """A TFRecord file mutated: its records (payloads re-framed with valid CRCs), its frames
    (length fields edited with the header CRC recomputed, CRCs broken, frames dropped,
    duplicated, reordered, truncated, trailing garbage) or, for compressed files, the
    compressed bytes themselves."""
    plain = decompress(data, compression)
    if plain is None or (compression and rng.random() < 0.15):
        return havoc(rng, data, others)  # a broken compressed stream
    framed = unframe(plain)
    payloads, tail = framed if framed else ([], plain)
    op = rng.randrange(10)
    frames = [frame(p) for p in payloads]
    if op <= 3 and payloads:
        i = rng.randrange(len(payloads))
        payloads[i] = message(rng, payloads[i], others)
        frames[i] = frame(payloads[i])
    elif op == 4 and frames:
        # A length field that lies, with a header CRC that vouches for it.
        i = rng.randrange(len(frames))
        (length,) = struct.unpack_from("<Q", frames[i])
        new = rng.choice(
            INTERESTING_INTS + [length + 1, max(length - 1, 0), length + 4, length * 2 + 7]
        )
        new &= 2**64 - 1
        head = struct.pack("<Q", new)
        frames[i] = head + struct.pack("<I", _native.masked_crc32c(head)) + frames[i][12:]
    elif op == 5 and frames:
        i = rng.randrange(len(frames))
        f = bytearray(frames[i])
        f[rng.choice((8, len(f) - 4, 12 if len(f) > 16 else 8))] ^= 0x01  # break a CRC or a byte
        frames[i] = bytes(f)
    elif op == 6 and frames:
        i = rng.randrange(len(frames))
        choice = rng.randrange(3)
        if choice == 0:
            del frames[i]
        elif choice == 1:
            frames.insert(rng.randrange(len(frames) + 1), frames[i])
        else:
            j = rng.randrange(len(frames))
            frames[i], frames[j] = frames[j], frames[i]
    elif op == 7:
        tail = tail + havoc(rng, b"", others, rounds=1)
    elif op == 8 and others:
        donor = decompress(rng.choice(others), "") or b""
        got = unframe(donor)
        if got and got[0]:
            frames.insert(rng.randrange(len(frames) + 1), frame(rng.choice(got[0])))
    out = b"".join(frames) + tail
    if op == 9 or rng.random() < 0.05:
        out = havoc(rng, out, others)
    return compress(out, compression, rng) if compression else out


# ---------------------------------------------------------------------------------------------
# Images

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _png_chunks(data: bytes) -> list[list] | None:
    if not data.startswith(PNG_MAGIC):
        return None
    pos, chunks = 8, []
    while pos + 12 <= len(data):
        (n,) = struct.unpack_from(">I", data, pos)
        if pos + 12 + n > len(data):
            return None
        chunks.append([data[pos + 4 : pos + 8], bytearray(data[pos + 8 : pos + 8 + n])])
        pos += 12 + n
    return chunks


def _png_bytes(chunks: list[list]) -> bytes:
    out = bytearray(PNG_MAGIC)
    for kind, body in chunks:
        out += struct.pack(">I", len(body)) + kind + body
        out += struct.pack(">I", zlib.crc32(kind + bytes(body)) & 0xFFFFFFFF)
    return bytes(out)


_SIDES = [0, 1, 2, 3, 7, 8, 9, 16, 255, 4096, 16384, 65535, 65536, 100_000, 2**31 - 1, 2**32 - 1]


def image(rng: random.Random, data: bytes) -> bytes:
    """A PNG or JPEG mutated where decoders look first: the declared size, bit depth, colour
    type, components and sampling (CRCs recomputed for PNG), or anywhere else byte by byte."""
    chunks = _png_chunks(data)
    if chunks and rng.random() < 0.7:
        ihdr = next((c for c in chunks if c[0] == b"IHDR" and len(c[1]) == 13), None)
        op = rng.randrange(5)
        if ihdr is not None and op <= 1:
            side = rng.choice(("w", "h", "both"))
            body = ihdr[1]
            for k, off in (("w", 0), ("h", 4)):
                if side in (k, "both"):
                    body[off : off + 4] = struct.pack(">I", rng.choice(_SIDES))
        elif ihdr is not None and op == 2:
            ihdr[1][8] = rng.choice((1, 2, 4, 8, 16, 3, 0))
            ihdr[1][9] = rng.choice((0, 2, 3, 4, 6, 1, 7))
            ihdr[1][12] = rng.choice((0, 1, 2))
        elif op == 3:
            i = rng.randrange(len(chunks))
            chunks[i][1] = bytearray(havoc(rng, bytes(chunks[i][1])))
        else:
            i = rng.randrange(len(chunks))
            if rng.random() < 0.5:
                del chunks[i]
            else:
                chunks.insert(i, [chunks[i][0], bytearray(chunks[i][1])])
        return _png_bytes(chunks)
    if data.startswith(b"\xff\xd8") and rng.random() < 0.6:
        buf = bytearray(data)
        sofs = [
            i for i in range(len(buf) - 9) if buf[i] == 0xFF and buf[i + 1] in (0xC0, 0xC1, 0xC2)
        ]
        if sofs:
            i = rng.choice(sofs)
            op = rng.randrange(3)
            if op == 0:
                off = i + 5 + rng.choice((0, 2))  # height, width
                side = rng.choice([s for s in _SIDES if s < 65536])
                buf[off : off + 2] = struct.pack(">H", side)
            elif op == 1 and i + 9 < len(buf):
                buf[i + 9] = rng.choice((0, 1, 2, 3, 4, 5, 255))  # components
            elif i + 11 < len(buf):
                buf[i + 11] = rng.choice((0x11, 0x22, 0x44, 0x41, 0x14, 0x00, 0xFF))  # sampling
            return bytes(buf)
    return havoc(rng, data)
