"""The framed, pickle-free wire format between the engine, its workers and their children.

A frame is ``!Q`` body length, then the body: ``!I`` header length, a JSON header, then raw blobs.
The header's ``"blobs"`` lists the blob sizes. Values are plain JSON types; NumPy arrays travel as
``.npy`` blobs written and read with ``allow_pickle=False``; ``bytes`` travel as raw blobs. Nothing on
this path ever unpickles.
"""

from __future__ import annotations

import io
import json
import math
import os
import struct
from typing import Any

import numpy as np

__all__ = [
    "FRAME_LEN", "NotPlainDataError", "WireError", "check_array_dtype", "decode_frame", "decode_value", "encode_frame",
    "read_exact", "read_frame", "split_body", "write_all",
]

FRAME_LEN = struct.Struct("!Q")
_HEAD_LEN = struct.Struct("!I")
_ND, _BYTES, _ESC = "$nd", "$b", "$d"  # markers inside the JSON header


class WireError(Exception):
    """A frame is malformed (garbage from a child, a truncated pipe)."""


class NotPlainDataError(TypeError):
    """A value holds something other than JSON types, bytes and non-object NumPy arrays."""


def _encode(obj: Any, blobs: list[bytes], path: str) -> Any:
    """Replaces arrays and bytes by blob references; refuses anything that is not plain data."""
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return float(obj)
    if isinstance(obj, np.generic):  # NumPy scalars become Python numbers
        if obj.dtype.kind in "biuf":
            return obj.item()
        if obj.dtype.kind == "c":
            raise NotPlainDataError(f"{path}: complex scalars are not plain data")
        return _encode(obj.item(), blobs, path)
    if isinstance(obj, np.ndarray):
        if obj.dtype.hasobject:
            raise NotPlainDataError(f"{path}: object arrays are not plain data")
        if obj.dtype.byteorder == ">":
            obj = obj.astype(obj.dtype.newbyteorder("<"))
        try:
            check_array_dtype(obj.dtype, path)
        except WireError as exc:
            raise NotPlainDataError(str(exc)) from None
        buf = io.BytesIO()
        np.save(buf, obj, allow_pickle=False)
        blobs.append(buf.getvalue())
        return {_ND: len(blobs) - 1}
    if isinstance(obj, (bytes, bytearray, memoryview)):
        blobs.append(bytes(obj))
        return {_BYTES: len(blobs) - 1}
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if not isinstance(k, str):
                raise NotPlainDataError(f"{path}: dict key {k!r} is not a str")
            out[k] = _encode(v, blobs, f"{path}[{k!r}]")
        # A user dict that looks like one of our markers is escaped, so it decodes as itself.
        if any(k.startswith("$") for k in out):
            return {_ESC: out}
        return out
    if isinstance(obj, (list, tuple)):
        return [_encode(v, blobs, f"{path}[{i}]") for i, v in enumerate(obj)]
    raise NotPlainDataError(f"{path}: {type(obj).__module__}.{type(obj).__qualname__} is not plain data")


def _decode(obj: Any, blobs: list[memoryview]) -> Any:
    """Inverse of :func:`_encode`."""
    if isinstance(obj, list):
        return [_decode(v, blobs) for v in obj]
    if isinstance(obj, dict):
        if len(obj) == 1:
            (key, val), = obj.items()
            if key == _ND:
                return _load_array(blobs, val)
            if key == _BYTES:
                return bytes(_blob(blobs, val))
            if key == _ESC:
                if not isinstance(val, dict):
                    raise WireError("bad escaped dict")
                return {k: _decode(v, blobs) for k, v in val.items()}
        return {k: _decode(v, blobs) for k, v in obj.items()}
    return obj


def _blob(blobs: list[memoryview], index: Any) -> memoryview:
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(blobs):
        raise WireError(f"bad blob reference {index!r}")
    return blobs[index]


_ARRAY_KINDS = "biuf"  # bool, signed and unsigned ints, floats: what a number array may hold


def check_array_dtype(dtype: np.dtype[Any], where: str = "array") -> None:
    """Refuses every dtype but plain bool/int/uint/float, native or little-endian.

    Zero-size (``V0``, ``S0``), string, datetime, structured and sub-array dtypes let a tiny blob
    declare a huge array, or carry something that is not a number: none of them crosses the wire.

    Raises:
        WireError: the dtype is not a plain little-endian number type.
    """
    if dtype.kind not in _ARRAY_KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise WireError(f"{where}: dtype {dtype.str!r} is not a plain bool/int/uint/float dtype")
    if dtype.byteorder == ">":  # native ("=") or little-endian ("<") only; "|" is one byte
        raise WireError(f"{where}: dtype {dtype.str!r} is big-endian")


def _load_array(blobs: list[memoryview], index: Any) -> np.ndarray:
    """Loads one ``.npy`` blob whose header must tell the truth: a plain number dtype, and exactly
    as many data bytes as its shape and item size declare."""
    blob = _blob(blobs, index)
    fh = io.BytesIO(blob)
    try:
        version = np.lib.format.read_magic(fh)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh, max_header_size=10_000)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh, max_header_size=10_000)
        else:
            raise WireError(f"bad array blob: .npy version {version} is not supported")
    except WireError:
        raise
    except Exception as exc:  # a corrupt .npy header from a hostile child
        raise WireError(f"bad array blob: {exc}") from None
    check_array_dtype(dtype, "array blob")
    if any(d < 0 for d in shape):
        raise WireError(f"array blob declares a negative dimension in shape {shape}")
    count = math.prod(shape)
    data = blob[fh.tell():]
    if count * dtype.itemsize != len(data):
        raise WireError(f"array blob declares shape {shape} of {dtype.str} ({count * dtype.itemsize} bytes) "
                        f"but carries {len(data)} bytes")
    arr = np.frombuffer(data, dtype=dtype, count=count).copy()  # owned and writable, like np.load's
    return arr.reshape(shape, order="F" if fortran else "C")


def encode_frame(header: dict[str, Any], value: Any = None, *, path: str = "value") -> bytes:
    """One complete frame: ``header`` (plain JSON) plus ``value`` (plain data, arrays as blobs).

    Raises:
        NotPlainDataError: ``value`` holds something that is not plain data.
    """
    blobs: list[bytes] = []
    head = dict(header)
    head["value"] = _encode(value, blobs, path)
    head["blobs"] = [len(b) for b in blobs]
    try:
        hbytes = json.dumps(head, separators=(",", ":"), allow_nan=True).encode()
    except (ValueError, UnicodeEncodeError) as exc:
        raise NotPlainDataError(f"{path}: {exc}") from None
    body_len = _HEAD_LEN.size + len(hbytes) + sum(len(b) for b in blobs)
    return b"".join([FRAME_LEN.pack(body_len), _HEAD_LEN.pack(len(hbytes)), hbytes, *blobs])


def decode_value(obj: Any, blobs: list[memoryview]) -> Any:
    """Decodes a header's encoded value against the frame's blobs (see :func:`split_body`).

    Raises:
        WireError: the value is malformed (bad references, lying arrays, nesting too deep).
    """
    try:
        return _decode(obj, blobs)
    except WireError:
        raise
    except RecursionError:
        raise WireError("value is nested too deeply") from None
    except Exception as exc:  # whatever else a hostile frame can make decoding raise
        raise WireError(f"malformed value: {type(exc).__name__}: {exc}") from None


def split_body(body: bytes | memoryview) -> tuple[dict[str, Any], list[memoryview]]:
    """Parses a frame body into its JSON header and raw blobs (no value decoding)."""
    mv = memoryview(body)
    if len(mv) < _HEAD_LEN.size:
        raise WireError("frame shorter than its header length")
    (hlen,) = _HEAD_LEN.unpack_from(mv)
    end = _HEAD_LEN.size + hlen
    if end > len(mv):
        raise WireError("frame header runs past the frame")
    try:
        head = json.loads(bytes(mv[_HEAD_LEN.size:end]))
    except (ValueError, UnicodeDecodeError) as exc:
        raise WireError(f"frame header is not JSON: {exc}") from None
    except RecursionError:
        raise WireError("frame header is nested too deeply") from None
    if not isinstance(head, dict):
        raise WireError("frame header is not a JSON object")
    sizes = head.get("blobs", [])
    if not isinstance(sizes, list) or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in sizes):
        raise WireError("bad blob size list")
    if end + sum(sizes) != len(mv):
        raise WireError("blob sizes do not add up to the frame length")
    blobs, pos = [], end
    for s in sizes:
        blobs.append(mv[pos:pos + s])
        pos += s
    return head, blobs


def decode_frame(body: bytes | memoryview) -> tuple[dict[str, Any], Any]:
    """Parses a frame body; returns ``(header, value)`` with arrays loaded (``allow_pickle=False``).

    Raises:
        WireError: the body is not a well-formed frame.
    """
    head, blobs = split_body(body)
    return head, decode_value(head.get("value"), blobs)


def read_exact(fd: int, n: int) -> bytes:
    """Reads exactly ``n`` bytes from a blocking fd (EOF before that is a :class:`WireError`)."""
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            raise WireError(f"pipe closed after {got} of {n} bytes")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_frame(fd: int, max_body: int) -> bytes:
    """Reads one frame body from a blocking fd, refusing (without reading) a body over ``max_body``."""
    (n,) = FRAME_LEN.unpack(read_exact(fd, FRAME_LEN.size))
    if n > max_body:
        raise WireError(f"frame of {n} bytes exceeds the {max_body}-byte cap")
    return read_exact(fd, n)


def write_all(fd: int, data: bytes | memoryview) -> None:
    """Writes all of ``data`` to a blocking fd."""
    mv = memoryview(data)
    while mv:
        n = os.write(fd, mv)
        mv = mv[n:]

