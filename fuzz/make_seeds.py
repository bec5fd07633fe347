#!/usr/bin/env python3
"""Writes the fuzzer's seed files (fuzz/seeds/*.safetensors): a few small valid
files and a few near-valid ones. Standard library only; run once, from anywhere."""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "seeds")


def image(tensors, metadata=None, pad=True):
    """tensors: list of (name, dtype, shape, bytes); laid out in order."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def raw_header(text, data=b""):
    return struct.pack("<Q", len(text)) + text + data


def main():
    os.makedirs(OUT, exist_ok=True)
    bf16 = struct.pack("<6H", 0x3F80, 0xBF80, 0x7F80, 0xFF80, 0x7FC0, 0x0001)
    f32 = struct.pack("<8f", *[i + 0.5 for i in range(8)])
    seeds = {
        "valid_one_bf16": image([("w", "BF16", [2, 3], bf16)]),
        "valid_mixed": image(
            [("a.f32", "F32", [2, 4], f32), ("b.i64", "I64", [2], struct.pack("<2q", -1, 7)),
             ("c.i32", "I32", [1, 1, 2], struct.pack("<2i", 3, -3)), ("d.f16", "F16", [1], b"\x00\x3c"),
             ("e.empty", "F32", [0, 5], b"")],
            metadata={"format": "pt", "note": "seed"}),
        "valid_unsupported_dtypes": image(
            [("x.f64", "F64", [1], struct.pack("<d", 2.0)), ("y.u8", "U8", [3], b"\x01\x02\x03"),
             ("z.bool", "BOOL", [1], b"\x01"), ("s.scalar", "I32", [], struct.pack("<i", 9))]),
        "valid_five_dims": image([("t", "BF16", [1, 1, 1, 2, 1], bf16[:4])]),
        "valid_empty": image([], metadata={}),
        # near-valid: each breaks one rule
        "bad_overlap": raw_header(
            b'{"p":{"dtype":"I32","shape":[2],"data_offsets":[0,8]},"q":{"dtype":"I32","shape":[1],"data_offsets":[4,8]}}',
            bytes(8)),
        "bad_size_mismatch": raw_header(b'{"p":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}}', bytes(24)),
        "bad_past_end": raw_header(b'{"p":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]}}', bytes(6)),
        "bad_header_length": struct.pack("<Q", 4096) + b'{"p":{}}',
    }
    for name, blob in seeds.items():
        assert len(blob) < 4096, name
        with open(os.path.join(OUT, name + ".safetensors"), "wb") as fp:
            fp.write(blob)


if __name__ == "__main__":
    main()
