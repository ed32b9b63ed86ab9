"""formats/atomic_file.py's safetensors writer: a tensor at a time, yet the very bytes safetensors' own
serializer makes, so every reader of the format (ComfyUI's loaders, safetensors' safe_open) reads it."""

import io
import json
import struct

import safetensors.torch
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from eridiffusion.formats.atomic_file import write_safetensors, write_safetensors_atomic

DTYPES = [
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.float64,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.bool,
    torch.float8_e4m3fn,
    torch.float8_e5m2,
]

SIZES = {"F64": 8, "I64": 8, "F32": 4, "I32": 4, "F16": 2, "BF16": 2, "I16": 2}
SIZES.update(dict.fromkeys(["I8", "U8", "BOOL", "F8_E4M3", "F8_E5M2"], 1))
names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz._0123456789", min_size=1, max_size=24)
shapes = st.lists(st.integers(min_value=0, max_value=5), min_size=0, max_size=3)
tensors = st.dictionaries(
    names, st.tuples(st.sampled_from(DTYPES), shapes, st.integers(0, 2**31 - 1)), min_size=0, max_size=8
)
metadata = st.one_of(st.none(), st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=20), max_size=4))
# (any text: safetensors writes the header's non-ASCII characters as UTF-8, not escaped)


def parts(data):
    """A safetensors file's metadata and {name: (dtype, shape, bytes)}; its header's length a multiple of 8,
    its tensors' bytes one after another from the start of the data, each aligned to its element size (as
    a reader that maps the file wants them). (Not the bytes themselves: safetensors orders its metadata as a
    hash map does.)"""
    length = struct.unpack("<Q", data[:8])[0]
    assert length % 8 == 0
    header, body = json.loads(data[8 : 8 + length]), data[8 + length :]
    metadata = header.pop("__metadata__", None)
    spans = sorted(entry["data_offsets"] for entry in header.values())
    assert [start for start, _ in spans] == [0] + [end for _, end in spans[:-1]] and spans[-1][1] == len(body)
    for entry in header.values():
        size = max(SIZES[entry["dtype"]], 1)
        assert entry["data_offsets"][0] % size == 0
    return metadata, {k: (e["dtype"], e["shape"], body[slice(*e["data_offsets"])]) for k, e in header.items()}


def made(spec):
    """{name: tensor} of (dtype, shape, seed) triples: random values in each dtype."""
    out = {}
    for name, (dtype, shape, seed) in spec.items():
        values = torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 50
        out[name] = values.to(dtype)
    return out


@settings(max_examples=150, deadline=None)
@given(tensors, metadata)
def test_the_streamed_file_is_the_bytes_safetensors_makes(spec, meta):
    tensors = made(spec)
    f = io.BytesIO()
    write_safetensors(f, tensors, meta)
    if tensors:
        ours, theirs = parts(f.getvalue()), parts(safetensors.torch.save(tensors, metadata=meta))
        assert ours == theirs
    else:  # (safetensors' own bytes of no tensor with metadata are `{},"__metadata__":{}}`: ours, read back)
        assert safetensors.torch.load(f.getvalue()) == {}


def test_a_written_file_reads_back_in_safetensors_with_its_metadata(tmp_path):
    tensors = {
        "b.weight": torch.randn(6, 4),
        "a.weight": torch.randn(3).bfloat16(),
        "step": torch.tensor(7),
        "scale": torch.randn(2, 2).to(torch.float8_e4m3fn),
        "view": torch.randn(4, 6).t(),  # (not contiguous: written in its logical order)
    }
    path = write_safetensors_atomic(str(tmp_path / "x.safetensors"), tensors, {"architecture": "SD15"})
    back = safetensors.torch.load_file(path)
    assert back.keys() == tensors.keys()
    for key, tensor in tensors.items():
        assert back[key].dtype == tensor.dtype and torch.equal(back[key].float(), tensor.float()), key
    with safetensors.safe_open(path, "pt") as f:
        assert f.metadata() == {"architecture": "SD15"}
    assert [p.name for p in tmp_path.iterdir()] == ["x.safetensors"]  # (no temp file of any writer left)
