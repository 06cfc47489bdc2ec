"""jaxrec: feed TFRecord data to JAX without TensorFlow.

The public API mirrors ``tf.io`` / ``tf.train`` names so code ports by changing the import::

    import jaxrec as jr

    with jr.TFRecordWriter("data.tfrecord") as w:
        w.write(jr.encode_example({"label": 1, "tokens": [5, 7, 9]}))
    spec = {"label": jr.FixedLenFeature([], np.int32),
            "tokens": jr.VarLenFeature(np.int32, max_len=8)}
    batch = jr.parse_example(list(jr.read_records("data.tfrecord")), spec)
"""

from jaxrec import errors as errors
from jaxrec import tfds as tfds
from jaxrec._composite import RaggedFeature as RaggedFeature
from jaxrec._composite import SparseFeature as SparseFeature
from jaxrec._example.codecs import decode_image as decode_image
from jaxrec._example.codecs import encode_jpeg as encode_jpeg
from jaxrec._example.codecs import encode_png as encode_png
from jaxrec._example.codecs import parse_tensor as parse_tensor
from jaxrec._example.codecs import serialize_tensor as serialize_tensor
from jaxrec._example.encode import encode_example as encode_example
from jaxrec._example.encode import encode_sequence_example as encode_sequence_example
from jaxrec._example.encode import make_example as make_example
from jaxrec._example.encode import make_sequence_example as make_sequence_example
from jaxrec._example.encode import to_feature as to_feature
from jaxrec._example.proto import BytesList as BytesList
from jaxrec._example.proto import Example as Example
from jaxrec._example.proto import Feature as Feature
from jaxrec._example.proto import FeatureList as FeatureList
from jaxrec._example.proto import FeatureLists as FeatureLists
from jaxrec._example.proto import Features as Features
from jaxrec._example.proto import FloatList as FloatList
from jaxrec._example.proto import Int64List as Int64List
from jaxrec._example.proto import SequenceExample as SequenceExample
from jaxrec._example.schema import infer_schema as infer_schema
from jaxrec._io.index import RandomAccessReader as RandomAccessReader
from jaxrec._io.index import TFRecordIndex as TFRecordIndex
from jaxrec._io.manifest import Manifest as Manifest
from jaxrec._io.paths import expand_paths as expand_paths
from jaxrec._io.records import TFRecordWriter as TFRecordWriter
from jaxrec._io.records import read_chunks as read_chunks
from jaxrec._io.records import read_records as read_records
from jaxrec._loader.bucketing import Bucket as Bucket
from jaxrec._loader.device import Batch as Batch
from jaxrec._loader.loader import BatchInfo as BatchInfo
from jaxrec._loader.loader import Loader as Loader
from jaxrec._loader.mixing import Mix as Mix
from jaxrec._loader.packing import Pack as Pack
from jaxrec._loader.transforms import MapTransform as MapTransform
from jaxrec._loader.transforms import RandomMapTransform as RandomMapTransform
from jaxrec._loader.transforms import per_record as per_record
from jaxrec._native import Chunk as Chunk
from jaxrec._native import __version__ as __version__
from jaxrec._native import masked_crc32c as masked_crc32c
from jaxrec._parse import ExampleParser as ExampleParser
from jaxrec._parse import parse_example as parse_example
from jaxrec._parse import parse_sequence_example as parse_sequence_example
from jaxrec._parse import parse_single_example as parse_single_example
from jaxrec._parse import parse_single_sequence_example as parse_single_sequence_example
from jaxrec._spec import FixedLenFeature as FixedLenFeature
from jaxrec._spec import FixedLenSequenceFeature as FixedLenSequenceFeature
from jaxrec._spec import Image as Image
from jaxrec._spec import RawTensor as RawTensor
from jaxrec._spec import SerializedTensor as SerializedTensor
from jaxrec._spec import VarLenFeature as VarLenFeature
from jaxrec._spec import length_key as length_key
from jaxrec._spec import shape_key as shape_key
from jaxrec._spec import valid_key as valid_key
from jaxrec.distributed import initialize_distributed as initialize_distributed
from jaxrec.errors import CorruptRecordError as CorruptRecordError
from jaxrec.errors import EncodeError as EncodeError
from jaxrec.errors import ExampleParseError as ExampleParseError
from jaxrec.errors import FeatureSpecError as FeatureSpecError
from jaxrec.errors import FileChangedError as FileChangedError
from jaxrec.errors import JaxrecError as JaxrecError
from jaxrec.errors import ShardingError as ShardingError
from jaxrec.errors import SplitError as SplitError
from jaxrec.errors import StaleIndexError as StaleIndexError
from jaxrec.errors import TransformError as TransformError
from jaxrec.errors import TruncatedRecordError as TruncatedRecordError


def __getattr__(name: str):
    # `jr.grain` without importing grain (an optional dependency) with jaxrec itself.
    if name == "grain":
        import importlib

        return importlib.import_module("jaxrec.grain")
    raise AttributeError(f"module 'jaxrec' has no attribute {name!r}")


__all__ = [
    "Batch",
    "BatchInfo",
    "Bucket",
    "BytesList",
    "Chunk",
    "CorruptRecordError",
    "EncodeError",
    "Example",
    "ExampleParseError",
    "ExampleParser",
    "Feature",
    "FeatureList",
    "FeatureLists",
    "FeatureSpecError",
    "Features",
    "FileChangedError",
    "FixedLenFeature",
    "FixedLenSequenceFeature",
    "FloatList",
    "Image",
    "Int64List",
    "JaxrecError",
    "Loader",
    "Manifest",
    "MapTransform",
    "Mix",
    "Pack",
    "RaggedFeature",
    "RandomMapTransform",
    "RandomAccessReader",
    "RawTensor",
    "SequenceExample",
    "SerializedTensor",
    "ShardingError",
    "SplitError",
    "TransformError",
    "SparseFeature",
    "StaleIndexError",
    "TFRecordIndex",
    "TFRecordWriter",
    "TruncatedRecordError",
    "VarLenFeature",
    "decode_image",
    "encode_example",
    "encode_jpeg",
    "encode_png",
    "encode_sequence_example",
    "errors",
    "expand_paths",
    "infer_schema",
    "initialize_distributed",
    "length_key",
    "make_example",
    "make_sequence_example",
    "masked_crc32c",
    "parse_example",
    "parse_sequence_example",
    "parse_single_example",
    "parse_single_sequence_example",
    "parse_tensor",
    "per_record",
    "read_chunks",
    "read_records",
    "serialize_tensor",
    "shape_key",
    "tfds",
    "to_feature",
    "valid_key",
]
