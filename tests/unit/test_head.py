"""``jaxrec head``'s record text: long lists and bytes are shortened, and readable records never
print raw binary."""

from __future__ import annotations

import json

import jaxrec as jr
from jaxrec.cli.head import describe_record, format_record

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(40))


def test_records_that_are_not_examples():
    assert describe_record(b"\x00\x01\xffnot a proto")["type"] == "raw"
    assert describe_record(b"") == {"type": "Example", "features": {}}


def test_describe_record_shortens_and_never_prints_binary():
    rec = jr.encode_example(
        {
            "n": list(range(100)),
            "f": [0.1, float("nan"), float("-inf")],
            "t": "é\n\x1b[31m",
            "img": PNG,
        }
    )
    d = describe_record(rec, max_values=3, max_bytes=8)
    assert d["features"]["n"] == {
        "type": "int64_list",
        "count": 100,
        "values": [0, 1, 2],
        "truncated": True,
    }
    assert d["features"]["f"]["values"] == [0.1, "NaN", "-Infinity"]
    assert d["features"]["img"]["values"][0]["content"] == "png"
    assert d["features"]["img"]["values"][0]["truncated"] is True
    text = "\n".join(format_record(d))
    assert "\x1b" not in text and "<png, 48 bytes: 89504e470d0a1a0a…>" in text
    assert "[0, 1, 2, …]" in text
    json.dumps(d)  # JSON-able
