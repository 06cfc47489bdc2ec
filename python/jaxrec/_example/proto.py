r"""The ``tf.train`` messages (Example, SequenceExample and their parts), without TensorFlow.

The classes here have the same message names (package ``tensorflow``), field names, field
numbers, types and ``packed`` options as TensorFlow's ``tensorflow/core/example/feature.proto``
and ``example.proto``, so they read and write the same bytes and print the same text format as
``tf.train.Example`` and friends. ``tests/unit/test_proto.py`` compares them with TensorFlow's own
descriptors field by field.

Why they are built this way:

* **No protoc.** The schema is a ``FileDescriptorProto`` written out in code below and turned
  into classes at import with ``message_factory.GetMessageClass``. There is no generated
  ``*_pb2.py`` file to regenerate, and nothing ties us to the protoc version that generated it
  (generated code checks the runtime's version; a descriptor built at run time works with any
  ``protobuf>=4.21``).
* **A private descriptor pool.** The file is added to a ``DescriptorPool`` of our own, not to the
  process-wide default pool. TensorFlow registers ``tensorflow.Example`` in the default pool when
  it is imported; a second, different file defining the same full names there would make one of
  the two imports fail. With a private pool both sets of classes live side by side in one
  process. They are distinct Python classes (``isinstance`` across them is ``False``), but their
  wire format is identical, so ``tf.train.Example.FromString(ours.SerializeToString())`` works
  and vice versa.

Example:
    >>> from jaxrec._example.proto import Example, Feature, Features, Int64List
    >>> ex = Example(features=Features(feature={"label": Feature(int64_list=Int64List(value=[1]))}))
    >>> ex.SerializeToString()
    b'\n\x10\n\x0e\n\x05label\x12\x05\x1a\x03\n\x01\x01'
    >>> Example.FromString(ex.SerializeToString()).features.feature["label"].int64_list.value[0]
    1
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

__all__ = [
    "BytesList",
    "Example",
    "Feature",
    "FeatureList",
    "FeatureLists",
    "Features",
    "FloatList",
    "Int64List",
    "SequenceExample",
]

_FILE_NAME = "jaxrec/tensorflow_example.proto"
_PACKAGE = "tensorflow"

_F = descriptor_pb2.FieldDescriptorProto
_OPTIONAL = _F.LABEL_OPTIONAL
_REPEATED = _F.LABEL_REPEATED


def _field(
    msg: descriptor_pb2.DescriptorProto,
    name: str,
    number: int,
    label: int,
    ftype: int,
    type_name: str | None = None,
    oneof_index: int | None = None,
) -> descriptor_pb2.FieldDescriptorProto:
    """Appends one field to ``msg``; ``type_name`` is a message name relative to the package."""
    f = msg.field.add(name=name, number=number, label=label, type=ftype)
    if type_name is not None:
        f.type_name = f".{_PACKAGE}.{type_name}"
    if oneof_index is not None:
        f.oneof_index = oneof_index
    return f


def _map_field(
    msg: descriptor_pb2.DescriptorProto, name: str, number: int, value_type: str
) -> None:
    """Adds ``map<string, value_type> name = number;`` the way protoc lowers it.

    A map field is a repeated field of a nested ``<Name>Entry`` message (``key = 1``,
    ``value = 2``) whose options say ``map_entry: true``; protobuf then gives it dict behaviour.
    """
    entry_name = "".join(part.capitalize() for part in name.split("_")) + "Entry"
    entry = msg.nested_type.add(name=entry_name)
    entry.options.map_entry = True
    _field(entry, "key", 1, _OPTIONAL, _F.TYPE_STRING)
    _field(entry, "value", 2, _OPTIONAL, _F.TYPE_MESSAGE, value_type)
    _field(msg, name, number, _REPEATED, _F.TYPE_MESSAGE, f"{msg.name}.{entry_name}")


def _file_descriptor_proto() -> descriptor_pb2.FileDescriptorProto:
    """The schema of feature.proto and example.proto (TensorFlow 2.x), as one proto3 file."""
    fdp = descriptor_pb2.FileDescriptorProto(name=_FILE_NAME, package=_PACKAGE, syntax="proto3")

    # message BytesList { repeated bytes value = 1; }
    m = fdp.message_type.add(name="BytesList")
    _field(m, "value", 1, _REPEATED, _F.TYPE_BYTES)

    # message FloatList { repeated float value = 1 [packed = true]; }
    m = fdp.message_type.add(name="FloatList")
    _field(m, "value", 1, _REPEATED, _F.TYPE_FLOAT).options.packed = True

    # message Int64List { repeated int64 value = 1 [packed = true, jstype = JS_STRING]; }
    m = fdp.message_type.add(name="Int64List")
    f = _field(m, "value", 1, _REPEATED, _F.TYPE_INT64)
    f.options.packed = True
    f.options.jstype = descriptor_pb2.FieldOptions.JS_STRING

    # message Feature { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
    #                                Int64List int64_list = 3; } }
    m = fdp.message_type.add(name="Feature")
    m.oneof_decl.add(name="kind")
    _field(m, "bytes_list", 1, _OPTIONAL, _F.TYPE_MESSAGE, "BytesList", oneof_index=0)
    _field(m, "float_list", 2, _OPTIONAL, _F.TYPE_MESSAGE, "FloatList", oneof_index=0)
    _field(m, "int64_list", 3, _OPTIONAL, _F.TYPE_MESSAGE, "Int64List", oneof_index=0)

    # message Features { map<string, Feature> feature = 1; }
    m = fdp.message_type.add(name="Features")
    _map_field(m, "feature", 1, "Feature")

    # message FeatureList { repeated Feature feature = 1; }
    m = fdp.message_type.add(name="FeatureList")
    _field(m, "feature", 1, _REPEATED, _F.TYPE_MESSAGE, "Feature")

    # message FeatureLists { map<string, FeatureList> feature_list = 1; }
    m = fdp.message_type.add(name="FeatureLists")
    _map_field(m, "feature_list", 1, "FeatureList")

    # message Example { Features features = 1; }
    m = fdp.message_type.add(name="Example")
    _field(m, "features", 1, _OPTIONAL, _F.TYPE_MESSAGE, "Features")

    # message SequenceExample { Features context = 1; FeatureLists feature_lists = 2; }
    m = fdp.message_type.add(name="SequenceExample")
    _field(m, "context", 1, _OPTIONAL, _F.TYPE_MESSAGE, "Features")
    _field(m, "feature_lists", 2, _OPTIONAL, _F.TYPE_MESSAGE, "FeatureLists")
    return fdp


_POOL = descriptor_pool.DescriptorPool()
# AddSerializedFile rather than Add: it is the one entry point every protobuf backend (upb, cpp,
# python) has kept, and it never warns.
_POOL.AddSerializedFile(_file_descriptor_proto().SerializeToString())


def _message_class(name: str) -> type:
    cls = message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"{_PACKAGE}.{name}"))
    # Classes made at run time have no home module (``__module__`` is None), so pickle would have
    # to scan ``sys.modules`` for them and fails in a fresh worker process. Give them this one.
    cls.__module__ = __name__
    return cls


if TYPE_CHECKING:
    # What the classes look like to a type checker (the classes themselves exist only at run
    # time). Like mypy-protobuf's output, trimmed to the fields.
    from collections.abc import Iterable, Mapping

    from google.protobuf.internal.containers import (
        MessageMap,
        RepeatedCompositeFieldContainer,
        RepeatedScalarFieldContainer,
    )
    from google.protobuf.message import Message

    class BytesList(Message):
        """``tensorflow.BytesList``: ``repeated bytes value = 1``."""

        value: RepeatedScalarFieldContainer[bytes]

        def __init__(self, *, value: Iterable[bytes] | None = ...) -> None: ...

    class FloatList(Message):
        """``tensorflow.FloatList``: ``repeated float value = 1 [packed = true]``."""

        value: RepeatedScalarFieldContainer[float]

        def __init__(self, *, value: Iterable[float] | None = ...) -> None: ...

    class Int64List(Message):
        """``tensorflow.Int64List``: ``repeated int64 value = 1 [packed = true]``."""

        value: RepeatedScalarFieldContainer[int]

        def __init__(self, *, value: Iterable[int] | None = ...) -> None: ...

    class Feature(Message):
        """``tensorflow.Feature``: ``oneof kind`` (bytes_list, float_list, int64_list)."""

        bytes_list: BytesList
        float_list: FloatList
        int64_list: Int64List

        def __init__(
            self,
            *,
            bytes_list: BytesList | None = ...,
            float_list: FloatList | None = ...,
            int64_list: Int64List | None = ...,
        ) -> None: ...

    class Features(Message):
        """``tensorflow.Features``: ``map<string, Feature> feature = 1``."""

        feature: MessageMap[str, Feature]

        def __init__(self, *, feature: Mapping[str, Feature] | None = ...) -> None: ...

    class FeatureList(Message):
        """``tensorflow.FeatureList``: ``repeated Feature feature = 1``."""

        feature: RepeatedCompositeFieldContainer[Feature]

        def __init__(self, *, feature: Iterable[Feature] | None = ...) -> None: ...

    class FeatureLists(Message):
        """``tensorflow.FeatureLists``: ``map<string, FeatureList> feature_list = 1``."""

        feature_list: MessageMap[str, FeatureList]

        def __init__(self, *, feature_list: Mapping[str, FeatureList] | None = ...) -> None: ...

    class Example(Message):
        """``tensorflow.Example``: ``Features features = 1``."""

        features: Features

        def __init__(self, *, features: Features | None = ...) -> None: ...

    class SequenceExample(Message):
        """``tensorflow.SequenceExample``: ``context = 1``, ``feature_lists = 2``."""

        context: Features
        feature_lists: FeatureLists

        def __init__(
            self, *, context: Features | None = ..., feature_lists: FeatureLists | None = ...
        ) -> None: ...

else:
    BytesList = _message_class("BytesList")
    FloatList = _message_class("FloatList")
    Int64List = _message_class("Int64List")
    Feature = _message_class("Feature")
    Features = _message_class("Features")
    FeatureList = _message_class("FeatureList")
    FeatureLists = _message_class("FeatureLists")
    Example = _message_class("Example")
    SequenceExample = _message_class("SequenceExample")
