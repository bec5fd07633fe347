"""safetensors read/write with the standard library and numpy.

Layout: an 8-byte little-endian header length N, N bytes of JSON (a map from
tensor name to {dtype, shape, data_offsets: [begin, end]} plus an optional
"__metadata__" map of strings), then the data; offsets count from the first
byte after the header and tensors are row-major, little-endian.
"""
import json
import struct

import ml_dtypes
import numpy as np

DTYPES = {
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "F16": np.dtype("<f2"),
    "F32": np.dtype("<f4"),
    "F64": np.dtype("<f8"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}


def dtype_name(dt):
    dt = np.dtype(dt)
    for name, d in DTYPES.items():
        if d == dt:
            return name
    raise ValueError("no safetensors dtype for %s" % dt)


def encode(tensors, metadata=None):
    """Bytes of a safetensors file holding `tensors` (name -> array), in the
    order given, with an optional string metadata map."""
    header = {}
    if metadata is not None:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blobs = []
    off = 0
    for name, arr in tensors.items():
        arr = np.ascontiguousarray(arr)
        raw = arr.tobytes()
        header[name] = {"dtype": dtype_name(arr.dtype), "shape": list(arr.shape),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    return encode_raw(header, b"".join(blobs))


def encode_raw(header, data, pad=True):
    """A file from a header object (or JSON text) and raw data; pads the JSON
    with spaces to a multiple of 8 bytes like the reference writer."""
    text = header if isinstance(header, (bytes, str)) else json.dumps(header, separators=(",", ":"))
    if isinstance(text, str):
        text = text.encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def save(path, tensors, metadata=None):
    with open(path, "wb") as f:
        f.write(encode(tensors, metadata))


def load(path):
    """(tensors, metadata): name -> numpy array (a copy), metadata dict or {}."""
    with open(path, "rb") as f:
        buf = f.read()
    if len(buf) < 8:
        raise ValueError("%s: shorter than the 8-byte header length" % path)
    (n,) = struct.unpack("<Q", buf[:8])
    if 8 + n > len(buf):
        raise ValueError("%s: header length %d runs past the end" % (path, n))
    header = json.loads(buf[8:8 + n].decode())
    data = memoryview(buf)[8 + n:]
    meta = header.pop("__metadata__", None) or {}
    out = {}
    for name, info in header.items():
        dt = DTYPES[info["dtype"]]
        shape = tuple(info["shape"])
        b, e = info["data_offsets"]
        count = int(np.prod(shape, dtype=np.int64))
        if not (0 <= b <= e <= len(data)) or e - b != count * dt.itemsize:
            raise ValueError("%s: tensor %s has bad offsets" % (path, name))
        out[name] = np.frombuffer(data[b:e], dtype=dt).reshape(shape).copy()
    return out, meta
