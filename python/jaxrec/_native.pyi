# Typed stub of the native module (src/python.rs). Checked against the built module by
# `make lint` (mypy.stubtest), so it cannot drift.
from os import PathLike
from typing import BinaryIO, final

import numpy as np
import numpy.typing as npt

__all__ = [
    "decode_image",
    "encode_png",
    "encode_jpeg",
    "parse_tensor",
    "masked_crc32c",
    "Chunk",
    "RecordReader",
    "RecordWriter",
    "ExampleParser",
]

def masked_crc32c(data: bytes) -> int:
    """Masked CRC32C of `data`, as stored in TFRecord headers and footers."""

@final
class Chunk:
    """Records read in one go from one file: one buffer and the payload range of each record."""

    def __len__(self) -> int: ...
    def __getitem__(self, i: int, /) -> bytes: ...
    def to_list(self) -> list[bytes]: ...
    @property
    def path(self) -> str | None: ...
    @property
    def end_offset(self) -> int: ...
    @property
    def next_index(self) -> int: ...
    @property
    def indices(self) -> npt.NDArray[np.uint64]: ...
    @property
    def file_offsets(self) -> npt.NDArray[np.uint64]: ...
    @property
    def payload_bytes(self) -> int: ...

@final
class RecordReader:
    """Reads framed records from one TFRecord file, in chunks, with the GIL released."""

    def __new__(
        cls,
        path: str | PathLike[str],
        compression: str | None = "auto",
        verify: bool = True,
        skip_errors: bool = False,
        start_offset: int = 0,
        start_index: int = 0,
        file: BinaryIO | None = None,
        size: int | None = None,
    ) -> RecordReader: ...
    def read_chunk(self, max_records: int = ..., block_bytes: int = ...) -> Chunk | None: ...
    @property
    def compression(self) -> str: ...
    def stats(self) -> dict[str, object]: ...

@final
class RecordWriter:
    """Writes framed records to a (possibly compressed) file."""

    def __new__(
        cls, path: str | PathLike[str], compression: str | None = None, level: int | None = None
    ) -> RecordWriter: ...
    def write(self, record: bytes) -> None: ...
    def write_many(self, records: list[bytes]) -> None: ...
    def flush(self) -> None: ...
    def close(self) -> None: ...
    @property
    def records(self) -> int: ...

_FeatureTuple = tuple[
    str,
    int,
    int,
    str,
    int,
    int | None,
    bool,
    list[float] | None,
    list[int] | None,
    list[bytes] | None,
    bool,
]
# (values, view_dtype, lengths, steps, truncated, valid, shapes, skipped, skip_errors)
_Column = tuple[
    np.ndarray,
    str | None,
    npt.NDArray[np.int32] | None,
    npt.NDArray[np.int64] | None,
    int,
    npt.NDArray[np.bool_] | None,
    npt.NDArray[np.int32] | None,
    int,
    list[str],
]
# (feature index, "image" | "raw" | "tensor", parameters; see jaxrec/_spec.py)
_Decoder = tuple[int, str, dict[str, object]]

@final
class ExampleParser:
    """A compiled spec: parses batches of serialized records into numpy arrays."""

    def __new__(
        cls,
        features: list[_FeatureTuple],
        sequence_features: list[_FeatureTuple] | None = None,
        decoders: list[_Decoder] | None = None,
    ) -> ExampleParser: ...
    def parse(self, records: list[bytes]) -> tuple[list[_Column], list[_Column]]: ...
    def parse_chunk(self, chunk: Chunk) -> tuple[list[_Column], list[_Column]]: ...
    def parse_rows(
        self, chunks: list[Chunk], which: npt.NDArray[np.int64], rows: npt.NDArray[np.int64]
    ) -> tuple[list[_Column], list[_Column]]: ...

def decode_image(
    data: bytes, channels: int = 3, format: str = "auto", max_pixels: int = ...
) -> npt.NDArray[np.uint8]:
    """Decodes JPEG or PNG bytes to a `(height, width, channels)` uint8 array, GIL released."""

def encode_png(
    pixels: bytes, height: int, width: int, channels: int, level: int | None = None
) -> bytes:
    """Encodes `height x width x channels` uint8 pixels as PNG (zlib `level` 0-9), GIL released."""

def encode_jpeg(
    pixels: bytes,
    height: int,
    width: int,
    channels: int,
    quality: int = 95,
    chroma_downsampling: bool = True,
) -> bytes:
    """Encodes `height x width x channels` uint8 pixels as baseline JPEG, GIL released."""

def parse_tensor(data: bytes, dtype: str) -> _Column:
    """Decodes a serialized TensorProto holding `dtype` (a spec dtype code)."""
