"""A lower-bit copy of a GGUF file without llama.cpp's quantizer (``llama_model_quantize``), for a
llama.cpp library that does not export it (xllamacpp's prebuilt one): the int4 drafter kinds on
llama.cpp read such a copy (:func:`specchat.runtimes.llamacpp.lower_bit_copy`).

The file is read and written with gguf-py (``GGUFReader``, ``GGUFWriter``; every metadata key is
copied, ``general.file_type`` set to the copy's type), each weight is de-quantized by gguf-py
(``gguf.quants.dequantize``) and quantized again by ggml itself (``ggml_quantize_chunk`` of the
library in use). The choice of types is simpler than llama.cpp's mixes: a 2-D ``*.weight`` whose
rows are a whole number of the new type's blocks (256 for Q2_K, 32 for Q4_0) and that takes more
bits now becomes that type; the token embedding, the output head and everything else are copied
as they are. Q2_K rows that do not fit 256-blocks fall back to Q4_0 when they fit 32-blocks.
"""

from __future__ import annotations

import ctypes
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np


def bits_per_weight(type_name: str) -> float:
    """Bits per weight of a GGML type, its block's scales included (gguf-py's GGML_QUANT_SIZES)."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    block, size = GGML_QUANT_SIZES[GGMLQuantizationType[type_name]]
    return 8 * size / block


_SKIP = ("token_embd.weight", "output.weight")  # lookups and the head keep their precision


def _new_type(tensor, wanted: str) -> str | None:
    """The type ``tensor`` gets in a ``wanted`` copy, or None to copy it as it is."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    source = tensor.tensor_type.name
    if tensor.name in _SKIP or not tensor.name.endswith(".weight") or len(tensor.shape) != 2:
        return None
    for name in (wanted, "Q4_0") if wanted == "Q2_K" else (wanted,):
        block = GGML_QUANT_SIZES[GGMLQuantizationType[name]][0]
        if int(tensor.shape[0]) % block == 0 and bits_per_weight(source) > bits_per_weight(name):
            return name
    return None


def requantize(source: Path, target: Path, file_type: str, lib, *, threads: int | None = None) -> None:
    """Write a ``file_type`` (``Q2_K`` or ``Q4_0``) copy of the GGUF at ``source`` to ``target``.

    Args:
        lib: a loaded llama.cpp library exporting ``ggml_quantize_init`` and
            ``ggml_quantize_chunk`` (:class:`specchat.runtimes.llama_api.LlamaLibrary`).
        threads: tensors quantized at once (ggml's quantizer is single-threaded per call).

    Raises:
        ValueError: an unknown ``file_type``.
        RuntimeError: ggml wrote another size than the type's rows take (a library mismatch).
    """
    import gguf
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFReader, GGUFWriter, LlamaFileType

    if file_type not in ("Q2_K", "Q4_0"):
        raise ValueError(f"no lower-bit copy of type {file_type!r} (Q2_K or Q4_0)")
    reader = GGUFReader(source)
    arch = reader.fields["general.architecture"].contents()
    writer = GGUFWriter(target, arch=arch, endianess=reader.endianess)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        value = int(getattr(LlamaFileType, f"MOSTLY_{file_type}")) if field.name == "general.file_type" else field.contents()
        sub_type = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, value, field.types[0], sub_type=sub_type)

    def convert(tensor):
        kind = _new_type(tensor, file_type)
        if kind is None:
            return tensor.data, tensor.tensor_type
        qtype = GGMLQuantizationType[kind]
        rows = np.ascontiguousarray(gguf.quants.dequantize(tensor.data, tensor.tensor_type), dtype=np.float32)
        num_rows, per_row = int(np.prod(rows.shape[:-1])), int(rows.shape[-1])
        block, size = GGML_QUANT_SIZES[qtype]
        out = np.empty((num_rows, per_row // block * size), dtype=np.uint8)
        lib.ggml_quantize_init(int(qtype))
        written = lib.ggml_quantize_chunk(int(qtype), rows.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
                                          out.ctypes.data_as(ctypes.c_void_p), 0, num_rows, per_row, None)
        if written != out.nbytes:
            raise RuntimeError(f"ggml wrote {written} bytes of {kind} for {tensor.name}, expected {out.nbytes}")
        return out, qtype

    with ThreadPoolExecutor(max_workers=threads or os.cpu_count() or 1) as pool:
        converted = list(pool.map(convert, reader.tensors))
    for tensor, (data, qtype) in zip(reader.tensors, converted):
        writer.add_tensor_info(tensor.name, data.shape, data.dtype, data.nbytes, qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for data, _ in converted:
        writer.write_tensor_data(data, tensor_endianess=reader.endianess)
    writer.close()
