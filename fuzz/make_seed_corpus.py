#!/usr/bin/env python3
"""Writes the seed corpus of the safetensors fuzzer (fuzz/corpus/safetensors).

Files named ok-* are valid safetensors files; bad-* are malformed in one way
each. The corpus test (tests/model_safetensors_test.cc) checks that the parser
agrees with every name, so a seed is also a regression test. Inputs the fuzzer
adds later (scripts/fuzz) are named by hash and only must not crash.

Run from the repository root: python3 fuzz/make_seed_corpus.py
"""
import json
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "safetensors")
SIZES = {"BF16": 2, "F16": 2, "F32": 4}


def elements(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def pattern(n, seed):
    """n bytes that differ per seed."""
    return bytes((i * 31 + seed * 17) & 0xFF for i in range(n))


def layout(tensors, metadata=None):
    """Header dict and data for [(name, dtype, shape)] laid out back to back."""
    header, data = {}, b""
    for i, (name, dtype, shape) in enumerate(tensors):
        size = elements(shape) * SIZES.get(dtype, 1)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + size]}
        data += pattern(size, i)
    if metadata is not None:
        header["__metadata__"] = metadata
    return header, data


def file_bytes(header_text, data=b"", pad=True, length=None):
    raw = header_text.encode("utf-8") if isinstance(header_text, str) else header_text
    if pad:
        raw += b" " * ((8 - len(raw) % 8) % 8)
    n = len(raw) if length is None else length
    return struct.pack("<Q", n) + raw + data


def dump(header):
    return json.dumps(header, separators=(",", ":"))


def write(name, content):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(content)


def main():
    os.makedirs(OUT, exist_ok=True)
    for dtype in ("BF16", "F16", "F32"):
        h, d = layout([("a.weight", dtype, [3, 4]), ("b.bias", dtype, [4])], {"format": "pt"})
        write(f"ok-{dtype.lower()}.safetensors", file_bytes(dump(h), d))
    h, d = layout([("s", "F32", []), ("e", "BF16", [0, 5]), ("m", "F16", [2, 2]), ("w", "F32", [1, 3])])
    write("ok-mixed-scalar-empty.safetensors", file_bytes(dump(h), d))
    write("ok-empty-header.safetensors", file_bytes("{}"))
    write("ok-metadata-only.safetensors", file_bytes('{"__metadata__":{"format":"pt","k":"v"}}'))
    write("ok-unknown-field.safetensors",
          file_bytes('{"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":[1,{"y":null}]}}', b"\0" * 4))
    # The shape of a real (tiny) Qwen3 layer, so the fuzzer starts from realistic names.
    names = [("model.embed_tokens.weight", [8, 4]), ("model.norm.weight", [4])]
    for part, shape in [("input_layernorm.weight", [4]), ("self_attn.q_proj.weight", [4, 4]),
                        ("self_attn.k_proj.weight", [2, 4]), ("self_attn.v_proj.weight", [2, 4]),
                        ("self_attn.q_norm.weight", [2]), ("self_attn.k_norm.weight", [2]),
                        ("self_attn.o_proj.weight", [4, 4]), ("post_attention_layernorm.weight", [4]),
                        ("mlp.gate_proj.weight", [6, 4]), ("mlp.up_proj.weight", [6, 4]),
                        ("mlp.down_proj.weight", [4, 6])]:
        names.append((f"model.layers.0.{part}", shape))
    h, d = layout([(n, "BF16", s) for n, s in names], {"format": "pt"})
    write("ok-tiny-qwen3-layer.safetensors", file_bytes(dump(h), d))

    one = '{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'
    write("bad-shorter-than-length.safetensors", b"\x10\0\0\0\0")
    write("bad-header-beyond-file.safetensors", file_bytes(one, b"\0" * 8, length=4096))
    write("bad-header-length-absurd.safetensors", file_bytes(one, b"\0" * 8, length=1 << 40))
    write("bad-not-an-object.safetensors", file_bytes("[1,2]"))
    write("bad-invalid-json.safetensors", file_bytes('{"w":{"dtype":"F32",'))
    write("bad-not-utf8.safetensors", file_bytes(b'{"\xff\xfe":1}'))
    write("bad-deep-nesting.safetensors", file_bytes('{"w":' + "[" * 64 + "]" * 64 + "}"))
    write("bad-entry-not-object.safetensors", file_bytes('{"w":[0,8]}', b"\0" * 8))
    write("bad-missing-dtype.safetensors", file_bytes('{"w":{"shape":[2],"data_offsets":[0,8]}}', b"\0" * 8))
    write("bad-missing-shape.safetensors", file_bytes('{"w":{"dtype":"F32","data_offsets":[0,8]}}', b"\0" * 8))
    write("bad-missing-offsets.safetensors", file_bytes('{"w":{"dtype":"F32","shape":[2]}}', b"\0" * 8))
    write("bad-dtype-i64.safetensors", file_bytes('{"w":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}}', b"\0" * 8))
    write("bad-negative-dim.safetensors", file_bytes('{"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}', b"\0" * 8))
    write("bad-size-mismatch.safetensors", file_bytes('{"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}', b"\0" * 8))
    write("bad-begin-after-end.safetensors", file_bytes('{"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}}', b"\0" * 8))
    write("bad-overflowing-shape.safetensors",
          file_bytes('{"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}}'))
    write("bad-offsets-past-data.safetensors", file_bytes(one, b"\0" * 4))
    h, d = layout([("a", "F32", [64]), ("b", "BF16", [64])])
    write("bad-truncated-data.safetensors", file_bytes(dump(h), d[:-10]))
    write("bad-overlap.safetensors", file_bytes(
        '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}',
        b"\0" * 12))
    write("bad-hole.safetensors", file_bytes(
        '{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}',
        b"\0" * 12))
    write("bad-trailing-bytes.safetensors", file_bytes(one, b"\0" * 12))
    write("bad-duplicate-name.safetensors", file_bytes(
        '{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}',
        b"\0" * 8))
    write("bad-duplicate-key.safetensors", file_bytes(
        '{"a":{"dtype":"F32","dtype":"F16","shape":[1],"data_offsets":[0,4]}}', b"\0" * 4))
    write("bad-metadata-not-string.safetensors", file_bytes('{"__metadata__":{"format":1}}'))


if __name__ == "__main__":
    main()
