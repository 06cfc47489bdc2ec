# Typed stub of the native module (src/python/). Checked against the built module by
# `make lint` (mypy.stubtest), so it cannot drift.
from collections.abc import Callable, Sequence
from os import PathLike
from typing import Any, BinaryIO, final

import numpy as np
import numpy.typing as npt

from jaxrec._spec import CompiledFeature

__version__: str
MAX_POOLED_BLOCK: int

__all__ = [
    "__version__",
    "MAX_POOLED_BLOCK",
    "decode_image",
    "encode_png",
    "encode_jpeg",
    "parse_tensor",
    "serialize_tensor",
    "pack_documents",
    "masked_crc32c",
    "chunk_ids",
    "round_robin",
    "spare_batches",
    "release_spare_batches",
    "loader_started",
    "loader_ended",
    "settle_kept_memory",
    "name_thread",
    "Chunk",
    "RecordReader",
    "RecordWriter",
    "ExampleParser",
    "Column",
    "ParsedBatch",
    "ParseQueue",
    "NativeStream",
    "BatchMemory",
    "BatchParts",
]

def name_thread(name: str) -> None:
    """Names the calling thread for the operating system (first 15 bytes; Linux only)."""

def chunk_ids(handles: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """The distinct chunk ids record handles point into, ascending."""

def round_robin(per: list[npt.NDArray[np.uint64]], rounds: int, k: int) -> npt.NDArray[np.uint64]:
    """Whole rounds of the interleave: block ``r`` of each piece in turn, for each round."""

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
    def position(self, i: int) -> tuple[int, int]: ...
    def handles_between(
        self, cid: int, first: int, last: int | None = None
    ) -> npt.NDArray[np.uint64]: ...

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
        *,
        end_offset: int | None = None,
        sync: bool = False,
        max_record_bytes: int | None = None,
    ) -> RecordReader: ...
    def read_chunk(self, max_records: int = ..., block_bytes: int = ...) -> Chunk | None: ...
    def skip(self, n: int) -> int: ...
    @property
    def next_offset(self) -> int | None: ...
    @property
    def next_index(self) -> int: ...
    @property
    def compression(self) -> str: ...
    # records, bytes, skipped_records, skipped_bytes: int; errors: list[str]; skips: list[dict]
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

@final
class Column:
    """One parsed feature for the whole batch."""

    @property
    def values(self) -> np.ndarray: ...
    @property
    def view_dtype(self) -> str | None: ...
    @property
    def lengths(self) -> npt.NDArray[np.int32] | None: ...
    @property
    def steps(self) -> npt.NDArray[np.int64] | None: ...
    @property
    def truncated(self) -> int: ...
    @property
    def valid(self) -> npt.NDArray[np.bool_] | None: ...
    @property
    def shapes(self) -> npt.NDArray[np.int32] | None: ...
    @property
    def skipped(self) -> int: ...
    @property
    def skips(self) -> list[dict[str, Any]]: ...

@final
class ParsedBatch:
    """A parsed batch: one column per feature, in spec order."""

    @property
    def context(self) -> list[Column]: ...
    @property
    def sequence(self) -> list[Column]: ...

@final
class ExampleParser:
    """A compiled spec: parses batches of serialized records into numpy arrays."""

    def __new__(
        cls,
        features: Sequence[CompiledFeature],
        sequence_features: Sequence[CompiledFeature] | None = None,
    ) -> ExampleParser: ...
    def parse(self, records: list[bytes]) -> ParsedBatch: ...
    def parse_chunk(self, chunk: Chunk) -> ParsedBatch: ...
    def parse_rows(
        self, chunks: list[Chunk], which: npt.NDArray[np.int64], rows: npt.NDArray[np.int64]
    ) -> ParsedBatch: ...

@final
class ParseQueue:
    """Parses batches of records picked from chunks on native threads, taken by ticket."""

    def __new__(cls, parser: ExampleParser, threads: int, form: Any = None) -> ParseQueue: ...
    def submit(
        self, chunks: list[Chunk], which: npt.NDArray[np.int64], rows: npt.NDArray[np.int64]
    ) -> int: ...
    def submit_handles(
        self,
        chunks: list[Chunk],
        ids: list[int],
        handles: npt.NDArray[np.uint64],
        batch_size: int,
    ) -> tuple[int, int]: ...
    def result(
        self, ticket: int, timeout: float | None = None
    ) -> tuple[ParsedBatch, float] | None: ...
    def finished(
        self, ticket: int, timeout: float | None = None
    ) -> tuple[dict[str, Any], float, list[tuple[str, int, int, list[dict[str, Any]]]]] | None: ...
    def parse_now(
        self,
        chunks: list[Chunk],
        which: npt.NDArray[np.int64],
        rows: npt.NDArray[np.int64],
    ) -> tuple[dict[str, Any], float, list[tuple[str, int, int, list[dict[str, Any]]]]]: ...
    def __len__(self) -> int: ...
    def submit_read(
        self, reader: RecordReader, skip: int, max_records: int, block_bytes: int
    ) -> int: ...
    def read_result(
        self, ticket: int, timeout: float | None = None
    ) -> tuple[Chunk | None, float] | None: ...
    def forget_read(self, ticket: int) -> None: ...
    def close(self, wait: bool = True) -> None: ...

@final
class NativeStream:
    """A host's records of a segment: ranges or subsets of local files, read and queued natively."""

    def __new__(
        cls,
        lengths: list[int],
        cycle_length: int,
        block_length: int,
        state: tuple[int, list[tuple[int, int]], int, int],
        position: int,
        open_piece: Callable[
            [int],
            tuple[
                RecordReader | None,
                str,
                int,
                int | None,
                int | None,
                int,
                npt.NDArray[np.uint64] | None,
            ],
        ],
        queue: ParseQueue,
        block_bytes: int | None,
        auto_blocks: tuple[int, int, int],
        window: int = 0,
        window_order: Callable[[int, int], npt.NDArray[np.int64]] | None = None,
        skip_errors: bool = False,
    ) -> NativeStream: ...
    def take(self, n: int) -> int: ...
    def skip(self, n: int) -> None: ...
    def start_window(self, window: int, drop: int) -> None: ...
    def mark_hint(self) -> None: ...
    def submit(self, batch_size: int) -> tuple[int, int, list[int]]: ...
    def resolve(
        self, batch_size: int
    ) -> tuple[list[Chunk], npt.NDArray[np.int64], npt.NDArray[np.int64], list[int]]: ...
    @property
    def held(self) -> int: ...
    @property
    def finished(self) -> bool: ...
    @property
    def pending(self) -> int: ...
    @property
    def chunks_held(self) -> int: ...
    def hint(
        self,
    ) -> (
        tuple[int, tuple[int, list[tuple[int, int]], int, int], dict[int, tuple[int, int]]] | None
    ): ...
    def counters(self) -> tuple[int, int, float, list[dict[str, Any]]]: ...
    @property
    def record_bytes(self) -> float | None: ...
    def close(self) -> None: ...

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

def serialize_tensor(dtype: str, shape: tuple[int, ...], values: bytes | list[bytes]) -> bytes:
    """Serializes a tensor as a TensorProto, byte for byte like `tf.io.serialize_tensor`."""

def parse_tensor(data: bytes, dtype: str) -> Column:
    """Decodes a serialized TensorProto holding `dtype` (a spec dtype code) into one row."""

def pack_documents(
    values: list[npt.NDArray[np.uint8]],
    itemsizes: list[int],
    lengths: list[npt.NDArray[np.int32]],
    seq_lens: list[int],
    rows: int,
    split: bool,
) -> dict[str, Any]: ...
def spare_batches() -> tuple[int, int]:
    """`(count, bytes)` of the freed batch columns' memory kept for the next of their size."""

def release_spare_batches() -> None:
    """Frees the batch columns' memory kept for reuse."""

def loader_started() -> None:
    """A Loader starts: kept batch memory and pooled read blocks serve it as they are."""

def loader_ended() -> None:
    """A Loader ends: a moment after the last, the kernel may take the kept memory's pages."""

def settle_kept_memory() -> None:
    """Hands the kept memory's pages to the kernel now where no Loader runs (for tests)."""

@final
class BatchMemory:
    """The memory under a large decoded batch (images, tensors): the numpy array's base.

    When the array and its views are freed, the memory serves the next batch of its size.
    """

@final
class BatchParts:
    """The memory under a Loader batch's small arrays (scalar columns, lengths, the mask).

    Their shared base object: freed once the last of them (and of their views) is.
    """
