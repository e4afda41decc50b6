"""A GGUF file's header: its scalar metadata and its tensors' names, shapes and types, fast.

``gguf.GGUFReader`` builds a numpy view of every part of every metadata value, so reading the
header of the default 1.5B target (its 151,936-entry vocabulary and 151,387 merges are metadata)
took 5.7 s on this project's 2-core machine, and the app paid it in the middle of its first
reply. This reader walks the same layout (the GGUF spec, version 2 and 3, little-endian) with
the ``gguf`` package's own type tables, keeps scalar and string values, and skips the contents of
arrays without decoding them: the same file in about 0.1 s.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from pathlib import Path

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

_SCALARS = {
    GGUFValueType.UINT8: "B", GGUFValueType.INT8: "b", GGUFValueType.UINT16: "H", GGUFValueType.INT16: "h",
    GGUFValueType.UINT32: "I", GGUFValueType.INT32: "i", GGUFValueType.FLOAT32: "f", GGUFValueType.BOOL: "?",
    GGUFValueType.UINT64: "Q", GGUFValueType.INT64: "q", GGUFValueType.FLOAT64: "d",
}


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a GGUF file: its name, shape (GGUF's order: the fastest-varying dimension
    first), quantization type, element count and bytes as stored."""

    name: str
    shape: tuple[int, ...]
    type: GGMLQuantizationType
    n_elements: int
    n_bytes: int


@dataclass(frozen=True)
class GGUFHeader:
    """``fields``: metadata key → value for scalar and string values (arrays are left out);
    ``tensors``: every tensor's :class:`TensorInfo`, in file order."""

    fields: dict[str, object]
    tensors: list[TensorInfo]


class _Cursor:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, fmt: str):
        value = struct.unpack_from("<" + fmt, self.data, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        n = self.take("Q")
        self.pos += n
        return self.data[self.pos - n:self.pos].decode("utf-8", "replace")


def read_header(path: str | Path) -> GGUFHeader:
    """The header of the GGUF file at ``path``.

    Raises:
        ValueError: not a GGUF file, a GGUF version other than 2 or 3, or a header cut short.
    """
    with open(path, "rb") as f:
        head = f.read(24)
        if len(head) < 24 or head[:4] != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file")
        version, n_tensors, n_fields = struct.unpack_from("<IQQ", head, 4)
        if version not in (2, 3):
            raise ValueError(f"{path}: GGUF version {version} (2 or 3 are read)")
        size = 1 << 20
        while True:  # the header is read whole; the vocabulary makes it a few MB
            f.seek(24)
            data = f.read(size)
            try:
                return _parse(_Cursor(data), n_tensors, n_fields)
            except struct.error:
                if len(data) < size:
                    raise ValueError(f"{path}: the GGUF header is cut short") from None
                size *= 4


def _parse(cur: _Cursor, n_tensors: int, n_fields: int) -> GGUFHeader:
    fields: dict[str, object] = {}
    for _ in range(n_fields):
        key = cur.string()
        kind = GGUFValueType(cur.take("I"))
        if kind is GGUFValueType.ARRAY:
            item, count = GGUFValueType(cur.take("I")), cur.take("Q")
            if item is GGUFValueType.STRING:
                for _ in range(count):
                    length = cur.take("Q")  # (not `cur.pos += cur.take(…)`: that reads pos before take moves it)
                    cur.pos += length
            elif item is GGUFValueType.ARRAY:
                raise ValueError(f"metadata {key!r}: nested arrays are not read")
            else:
                cur.pos += count * struct.calcsize(_SCALARS[item])
            if cur.pos > len(cur.data):
                raise struct.error("past the end")
        elif kind is GGUFValueType.STRING:
            fields[key] = cur.string()
        else:
            fields[key] = cur.take(_SCALARS[kind])
    tensors = []
    for _ in range(n_tensors):
        name = cur.string()
        shape = tuple(cur.take("Q") for _ in range(cur.take("I")))
        qtype = GGMLQuantizationType(cur.take("I"))
        cur.take("Q")  # the data's offset
        n_elements = math.prod(shape)
        block, block_bytes = GGML_QUANT_SIZES[qtype]
        tensors.append(TensorInfo(name, shape, qtype, n_elements, n_elements // block * block_bytes))
    return GGUFHeader(fields, tensors)
