"""The tf.train messages built without protoc: schema, wire format and text format match TF's."""

from __future__ import annotations

import json
import pickle
import struct
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, text_format
from google.protobuf.descriptor import FieldDescriptor

from jaxrec._example.proto import (
    BytesList,
    Example,
    Feature,
    FeatureList,
    FeatureLists,
    Features,
    FloatList,
    Int64List,
    SequenceExample,
)

GOLDEN_PROTO = Path(__file__).resolve().parent.parent / "data" / "golden_proto"
GOLDEN_MESSAGES = json.loads((GOLDEN_PROTO / "manifest.json").read_text(encoding="utf-8"))[
    "messages"
]

ALL = [
    BytesList,
    FloatList,
    Int64List,
    Feature,
    Features,
    FeatureList,
    FeatureLists,
    Example,
    SequenceExample,
]

# message -> [(field, number, type, label, packed, containing oneof, message type)]
_R, _O = FieldDescriptor.LABEL_REPEATED, FieldDescriptor.LABEL_OPTIONAL
_MSG = FieldDescriptor.TYPE_MESSAGE
EXPECTED = {
    "BytesList": [("value", 1, FieldDescriptor.TYPE_BYTES, _R, False, None, None)],
    "FloatList": [("value", 1, FieldDescriptor.TYPE_FLOAT, _R, True, None, None)],
    "Int64List": [("value", 1, FieldDescriptor.TYPE_INT64, _R, True, None, None)],
    "Feature": [
        ("bytes_list", 1, _MSG, _O, False, "kind", "tensorflow.BytesList"),
        ("float_list", 2, _MSG, _O, False, "kind", "tensorflow.FloatList"),
        ("int64_list", 3, _MSG, _O, False, "kind", "tensorflow.Int64List"),
    ],
    "Features": [("feature", 1, _MSG, _R, False, None, "tensorflow.Features.FeatureEntry")],
    "FeatureList": [("feature", 1, _MSG, _R, False, None, "tensorflow.Feature")],
    "FeatureLists": [
        ("feature_list", 1, _MSG, _R, False, None, "tensorflow.FeatureLists.FeatureListEntry")
    ],
    "Example": [("features", 1, _MSG, _O, False, None, "tensorflow.Features")],
    "SequenceExample": [
        ("context", 1, _MSG, _O, False, None, "tensorflow.Features"),
        ("feature_lists", 2, _MSG, _O, False, None, "tensorflow.FeatureLists"),
    ],
}


def _field_table(cls: type) -> list[tuple]:
    rows = []
    for f in cls.DESCRIPTOR.fields:
        rows.append(
            (
                f.name,
                f.number,
                f.type,
                FieldDescriptor.LABEL_REPEATED if f.is_repeated else FieldDescriptor.LABEL_OPTIONAL,
                f.is_packed,
                f.containing_oneof.name if f.containing_oneof else None,
                f.message_type.full_name if f.message_type else None,
            )
        )
    return rows


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.DESCRIPTOR.name)
def test_fields_names_numbers_types_and_packing(cls):
    assert cls.DESCRIPTOR.full_name == f"tensorflow.{cls.DESCRIPTOR.name}"
    assert _field_table(cls) == EXPECTED[cls.DESCRIPTOR.name]


@pytest.mark.parametrize(
    ("cls", "field", "value_type"),
    [
        (Features, "feature", "tensorflow.Feature"),
        (FeatureLists, "feature_list", "tensorflow.FeatureList"),
    ],
)
def test_map_fields_are_maps(cls, field, value_type):
    entry = cls.DESCRIPTOR.fields_by_name[field].message_type
    assert entry.GetOptions().map_entry
    assert entry.fields_by_name["key"].type == FieldDescriptor.TYPE_STRING
    assert entry.fields_by_name["value"].message_type.full_name == value_type


def test_classes_live_in_a_private_pool():
    assert Example.DESCRIPTOR.file.pool is not descriptor_pool.Default()
    assert Example.DESCRIPTOR.file.package == "tensorflow"
    assert Example.DESCRIPTOR.file.name == "jaxrec/tensorflow_example.proto"
    assert Example.__module__ == "jaxrec._example.proto"


def _label_example():
    return Example(features=Features(feature={"label": Feature(int64_list=Int64List(value=[1]))}))


def test_build_example_like_tf_train():
    ex = _label_example()
    assert ex.features.feature["label"].int64_list.value == [1]
    assert ex.features.feature["label"].WhichOneof("kind") == "int64_list"
    # The bytes TensorFlow writes for the same message (checked against TF below).
    assert ex.SerializeToString() == b"\n\x10\n\x0e\n\x05label\x12\x05\x1a\x03\n\x01\x01"
    assert Example.FromString(ex.SerializeToString()) == ex


def test_text_format_looks_like_tf():
    text = text_format.MessageToString(_label_example())
    assert text == (
        "features {\n"
        "  feature {\n"
        '    key: "label"\n'
        "    value {\n"
        "      int64_list {\n"
        "        value: 1\n"
        "      }\n"
        "    }\n"
        "  }\n"
        "}\n"
    )
    assert text_format.Parse(text, Example()) == _label_example()


def test_oneof_keeps_one_kind():
    f = Feature(float_list=FloatList(value=[1.0]))
    f.int64_list.value.append(2)
    assert f.WhichOneof("kind") == "int64_list"
    assert not f.HasField("float_list")
    assert Feature().WhichOneof("kind") is None


def test_packed_encoding_on_the_wire():
    # field 1, wire type 2 (length-delimited), 8 bytes: two little-endian float32s
    assert FloatList(value=[1.0, 2.0]).SerializeToString() == b"\n\x08\x00\x00\x80?\x00\x00\x00@"
    assert Int64List(value=[1, 300]).SerializeToString() == b"\n\x03\x01\xac\x02"


def test_sequence_example_builds():
    seq = SequenceExample(
        context=Features(feature={"id": Feature(bytes_list=BytesList(value=[b"x"]))}),
        feature_lists=FeatureLists(
            feature_list={
                "tokens": FeatureList(
                    feature=[Feature(int64_list=Int64List(value=[i])) for i in range(3)]
                )
            }
        ),
    )
    back = SequenceExample.FromString(seq.SerializeToString())
    assert [f.int64_list.value[0] for f in back.feature_lists.feature_list["tokens"].feature] == [
        0,
        1,
        2,
    ]


def test_messages_pickle():
    ex = _label_example()
    data = pickle.dumps(ex)
    assert b"jaxrec._example.proto" in data  # found by module name in a fresh worker process
    assert pickle.loads(data) == ex


# --- against TensorFlow ---------------------------------------------------------------------
# ``tf_train`` (tests/conftest.py) is TF's classes rebuilt from its golden FileDescriptorProtos in
# a fresh pool (always), and TensorFlow's own ``tf.train`` when it is installed. ``golden_proto``
# is what TensorFlow itself gave: DescriptorProtos, bytes, text format, values read back
# (tests/data/golden_proto/, scripts/make_golden.py --only proto).

BY_NAME = {cls.DESCRIPTOR.name: cls for cls in ALL}
LIST_KINDS = {"BytesList": "bytes_list", "FloatList": "float_list", "Int64List": "int64_list"}


def _descriptor_proto(cls: type) -> descriptor_pb2.DescriptorProto:
    proto = descriptor_pb2.DescriptorProto()
    cls.DESCRIPTOR.CopyToProto(proto)
    return proto


def _f32_hex(v: float) -> str:
    return f"{struct.unpack('<I', struct.pack('<f', v))[0]:08x}"


def _list_json(kind: str, values) -> list:
    if kind == "float_list":
        return [_f32_hex(v) for v in values]
    if kind == "bytes_list":
        return [bytes(v).hex() for v in values]
    return [int(v) for v in values]


def _as_json(msg) -> dict | list:
    """A message's contents in the golden manifest's ``read`` form (as make_golden writes it)."""
    name = msg.DESCRIPTOR.name
    if name == "Feature":
        kind = msg.WhichOneof("kind")
        return {"kind": kind, "values": _list_json(kind, getattr(msg, kind).value) if kind else []}
    if name in LIST_KINDS:
        return _list_json(LIST_KINDS[name], msg.value)

    def features(f):
        return {k: _as_json(f.feature[k]) for k in sorted(f.feature)}

    if name == "Example":
        return {"features": features(msg.features)}
    lists = msg.feature_lists.feature_list
    return {
        "context": features(msg.context),
        "feature_lists": {k: [_as_json(s) for s in lists[k].feature] for k in sorted(lists)},
    }


def test_golden_classes_are_tensorflows_files(golden_tf_train, golden_proto):
    # The stand-ins for tf.train are TF's own two files, in a pool of their own: the same full
    # names as ours, different classes, as in a process that imported TensorFlow.
    files = [f["name"] for f in golden_proto["files"]]
    assert files == [
        "tensorflow/core/example/feature.proto",
        "tensorflow/core/example/example.proto",
    ]
    assert sorted(golden_proto["classes"]) == sorted(BY_NAME)
    for name, ours in BY_NAME.items():
        theirs = getattr(golden_tf_train, name)
        assert theirs is not ours
        assert theirs.DESCRIPTOR.full_name == ours.DESCRIPTOR.full_name
        assert theirs.DESCRIPTOR.file.name == golden_proto["classes"][name]["file"]
        assert theirs.DESCRIPTOR.file.pool is not ours.DESCRIPTOR.file.pool
        assert not isinstance(theirs(), ours)
    # The text copies kept for review say what the bytes say.
    for f in golden_proto["files"]:
        binary = descriptor_pb2.FileDescriptorProto.FromString(
            (GOLDEN_PROTO / f["binpb"]).read_bytes()
        )
        text = (GOLDEN_PROTO / f["txtpb"]).read_text(encoding="utf-8")
        assert binary.name == f["name"]
        assert text_format.Parse(text, descriptor_pb2.FileDescriptorProto()) == binary


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.DESCRIPTOR.name)
def test_descriptor_equals_tensorflows(tf_train, golden_proto, cls):
    theirs = getattr(tf_train, cls.DESCRIPTOR.name)
    golden = golden_proto["classes"][cls.DESCRIPTOR.name]
    assert theirs.DESCRIPTOR.full_name == cls.DESCRIPTOR.full_name == golden["full_name"]
    # The whole DescriptorProto: names, numbers, types, labels, options (packed, jstype,
    # map_entry), oneofs and nested entry messages.
    assert _descriptor_proto(cls) == _descriptor_proto(theirs)
    assert _descriptor_proto(cls) == descriptor_pb2.DescriptorProto.FromString(
        bytes.fromhex(golden["descriptor_proto_hex"])
    )
    assert [(f.name, f.number) for f in cls.DESCRIPTOR.fields] == [
        (f.name, f.number) for f in theirs.DESCRIPTOR.fields
    ]


def _rich_example_fields():
    return {
        "ints": Feature(int64_list=Int64List(value=[0, -1, 2**63 - 1, -(2**63)])),
        "floats": Feature(float_list=FloatList(value=[1.5, -0.0, float("inf")])),
        "bytes": Feature(bytes_list=BytesList(value=[b"\xff\x00", "é".encode()])),
        "empty": Feature(),
        "ключ": Feature(int64_list=Int64List(value=[])),
    }


def test_example_bytes_cross_parse_with_tensorflow(tf_train, golden_proto):
    golden = golden_proto["messages"]["rich_example"]
    ours = Example(features=Features(feature=_rich_example_fields()))
    data = ours.SerializeToString(deterministic=True)
    assert data.hex() == golden["serialized_hex"]  # the bytes TensorFlow writes for it
    theirs = tf_train.Example.FromString(data)
    assert theirs.SerializeToString(deterministic=True) == data
    for key, feature in ours.features.feature.items():
        tf_feature = theirs.features.feature[key]
        assert tf_feature.WhichOneof("kind") == feature.WhichOneof("kind")
        for kind in ("bytes_list", "float_list", "int64_list"):
            assert list(getattr(tf_feature, kind).value) == list(getattr(feature, kind).value)
    assert _as_json(theirs) == _as_json(ours) == golden["read"]  # what TensorFlow read back
    assert text_format.MessageToString(theirs) == text_format.MessageToString(ours)
    assert text_format.MessageToString(ours) == golden["text_format"]
    # and back: TF's bytes parse with our classes
    assert Example.FromString(theirs.SerializeToString()) == ours
    assert Example.FromString(bytes.fromhex(golden["serialized_hex"])) == ours


def test_label_example_bytes_match_tensorflow(tf_train, golden_proto):
    golden = golden_proto["messages"]["label_example"]
    theirs = tf_train.Example(
        features=tf_train.Features(
            feature={"label": tf_train.Feature(int64_list=tf_train.Int64List(value=[1]))}
        )
    )
    assert theirs.SerializeToString() == _label_example().SerializeToString()
    assert text_format.MessageToString(theirs) == text_format.MessageToString(_label_example())
    assert _label_example().SerializeToString().hex() == golden["serialized_hex"]
    assert text_format.MessageToString(_label_example()) == golden["text_format"]


def test_sequence_example_cross_parse_with_tensorflow(tf_train, golden_proto):
    golden = golden_proto["messages"]["sequence_example"]
    theirs = tf_train.SequenceExample()
    theirs.context.feature["len"].int64_list.value.append(2)
    steps = theirs.feature_lists.feature_list["tok"].feature
    steps.add().int64_list.value.extend([1, 2])
    steps.add().bytes_list.value.append(b"x")
    data = theirs.SerializeToString(deterministic=True)
    assert data.hex() == golden["serialized_hex"]  # as TensorFlow wrote it
    ours = SequenceExample.FromString(data)
    assert ours.context.feature["len"].int64_list.value == [2]
    assert [f.WhichOneof("kind") for f in ours.feature_lists.feature_list["tok"].feature] == [
        "int64_list",
        "bytes_list",
    ]
    assert _as_json(ours) == golden["read"]
    assert text_format.MessageToString(ours) == golden["text_format"]
    assert ours.SerializeToString(deterministic=True) == data
    assert tf_train.SequenceExample.FromString(ours.SerializeToString()) == theirs


def test_packed_lists_are_tensorflows_bytes(golden_proto):
    # The bytes test_packed_encoding_on_the_wire spells out are the ones TensorFlow writes.
    messages = golden_proto["messages"]
    assert (
        messages["float_list_packed"]["serialized_hex"] == b"\n\x08\x00\x00\x80?\x00\x00\x00@".hex()
    )
    assert messages["int64_list_packed"]["serialized_hex"] == b"\n\x03\x01\xac\x02".hex()


@pytest.mark.parametrize("key", sorted(GOLDEN_MESSAGES))
def test_tensorflows_messages_read_print_and_write_back(key):
    golden = GOLDEN_MESSAGES[key]
    cls = BY_NAME[golden["class"]]
    data = bytes.fromhex(golden["serialized_hex"])
    ours = cls.FromString(data)
    assert _as_json(ours) == golden["read"]
    assert ours.SerializeToString(deterministic=True) == data
    assert text_format.MessageToString(ours) == golden["text_format"]
    assert text_format.Parse(golden["text_format"], cls()) == ours
