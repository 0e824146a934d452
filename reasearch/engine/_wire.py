"""The framed, pickle-free wire format between the engine, its workers and their children.

A frame is ``!Q`` body length, then the body: ``!I`` header length, a JSON header, then raw blobs.
The header's ``"blobs"`` lists the blob sizes. Values are plain JSON types; a NumPy array travels as
its raw C-order bytes in a blob, its dtype (one of a fixed list of plain little-endian number
dtypes) and shape in the header (``{"$nd": [blob, dtype, shape]}``); ``bytes`` travel as raw blobs.
Nothing on this path ever unpickles or parses a NumPy header.

NumPy is imported only where an array is decoded: a process that never loaded NumPy cannot hold an
array to encode, so a warm image without NumPy (a candidate that does not import it) forks smaller.
"""

from __future__ import annotations

import json
import json.decoder
import json.encoder
import json.scanner
import math
import os
import select
import struct
import sys

TYPE_CHECKING = False  # as typing's, without importing typing into the worker's image (see _pump.Child)

if TYPE_CHECKING:
    from typing import Any

    import numpy as np

__all__ = [
    "FRAME_LEN", "NotPlainDataError", "WireError", "decode_frame", "decode_value", "encode_frame",
    "read_exact", "read_frame", "split_body", "wait_readable", "write_all",
]

FRAME_LEN = struct.Struct("!Q")
_HEAD_LEN = struct.Struct("!I")
_ND, _BYTES, _ESC = "$nd", "$b", "$d"  # markers inside the JSON header


def _not_json(obj: Any) -> Any:
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


# The ``_json`` C encoder and scanner, called directly: what ``json.dumps(separators=(",", ":"))``
# and ``json.loads`` reach through several layers of Python (an encoder object made per call, the
# encoding detection). Besides the time, every Python function on a path is a few more pages a
# freshly forked worker or child writes (reference counts, frames, allocations): a copy-on-write
# fault each. The fallbacks keep exactly ``json``'s behaviour wherever the fast path is missing or
# declines (see :func:`_dumps` and :func:`_loads`).
# (read with getattr: the C accelerators are private, absent from typeshed and from other implementations)
_c_make_encoder = getattr(json.encoder, "c_make_encoder", None)
_c_make_scanner = getattr(json.scanner, "c_make_scanner", None)
_C_ENCODER = (_c_make_encoder(None, _not_json, json.encoder.encode_basestring_ascii, None, ":", ",",
                              False, False, True)
              if _c_make_encoder is not None else None)
_C_SCAN = _c_make_scanner(json.decoder.JSONDecoder()) if _c_make_scanner else None


def _dumps(obj: Any) -> bytes:
    """``json.dumps(obj, separators=(",", ":"), allow_nan=True).encode()``: ASCII, no spaces."""
    if _C_ENCODER is None:
        return json.dumps(obj, separators=(",", ":"), allow_nan=True).encode()
    return "".join(_C_ENCODER(obj, 0)).encode()


def _loads(raw: bytes) -> Any:
    """``json.loads(raw)``: the scanner alone for a whole UTF-8 document with nothing around it (what
    :func:`_dumps` writes); anything else (whitespace, another encoding, an error) goes to
    ``json.loads``, which accepts or refuses it exactly as before."""
    if _C_SCAN is not None:
        try:
            text = raw.decode("utf-8")
            obj, end = _C_SCAN(text, 0)
            if end == len(text):
                return obj
        except (StopIteration, ValueError):
            pass
    return json.loads(raw)


class WireError(Exception):
    """A frame is malformed (garbage from a child, a truncated pipe)."""


class NotPlainDataError(TypeError):
    """A value holds something other than JSON types, bytes and non-object NumPy arrays."""


def _encode(obj: Any, blobs: list[bytes | memoryview], path: str) -> Any:
    """Replaces arrays and bytes by blob references; refuses anything that is not plain data."""
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return float(obj)
    np = sys.modules.get("numpy")  # not loaded: no array or NumPy scalar can exist in this process
    if np is not None:
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
            if obj.dtype.str not in _plain_dtypes():  # exactly what the decoder accepts
                raise NotPlainDataError(f"{path}: dtype {obj.dtype.str!r} is not a plain bool/int/uint/float dtype")
            flat = np.ascontiguousarray(obj).reshape(-1)  # a view when the array is C-contiguous already
            blobs.append(memoryview(flat.view(np.uint8)))
            return {_ND: [len(blobs) - 1, obj.dtype.str, list(obj.shape)]}
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


_MAX_NDIM = 64  # NumPy's own limit
_DTYPES: dict[str, Any] = {}  # dtype string -> dtype, filled on the first array (NumPy loaded then)


def _plain_dtypes() -> dict[str, Any]:
    """The dtypes an array may carry on the wire, by their little-endian ``dtype.str``: plain
    bool/int/uint/float. Zero-size (``V0``, ``S0``), string, datetime, structured and sub-array
    dtypes would let a tiny blob declare a huge array, or carry something that is not a number."""
    if not _DTYPES:
        import numpy as np  # noqa: PLC0415 (loaded on the first array only: see the module docstring)

        table = {}
        for code in "?bBhHiIlLqQefdg":
            dt = np.dtype(code)
            dt = dt if dt.itemsize == 1 else dt.newbyteorder("<")
            table[dt.str] = dt
        _DTYPES.update(table)  # in one step: another thread never sees a partial table
    return _DTYPES


def _load_array(blobs: list[memoryview], ref: Any) -> np.ndarray:
    """Builds one array from ``[blob, dtype, shape]``, which must tell the truth: a dtype from the
    plain list, a shape of non-negative ints, and exactly as many bytes as they declare."""
    import numpy as np  # noqa: PLC0415 (loaded on the first array only: see the module docstring)

    if not isinstance(ref, list) or len(ref) != 3:
        raise WireError(f"bad array blob reference {str(ref)[:100]!r}")
    index, dstr, shape = ref
    blob = _blob(blobs, index)
    dtype = _plain_dtypes().get(dstr) if isinstance(dstr, str) else None
    if dtype is None:
        raise WireError(f"array blob: dtype {str(dstr)[:40]!r} is not a plain little-endian bool/int/uint/float dtype")
    if not isinstance(shape, list) or len(shape) > _MAX_NDIM or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise WireError(f"array blob: bad shape {str(shape)[:100]!r} (at most {_MAX_NDIM} non-negative ints)")
    count = math.prod(shape)
    if count * dtype.itemsize != len(blob):
        raise WireError(f"array blob declares shape {tuple(shape)} of {dstr} ({count * dtype.itemsize} bytes) "
                        f"but carries {len(blob)} bytes")
    arr = np.frombuffer(blob, dtype=dtype, count=count).copy()  # owned and writable
    return arr.reshape(shape)


def encode_frame(header: dict[str, Any], value: Any = None, *, path: str = "value") -> bytes:
    """One complete frame: ``header`` (plain JSON) plus ``value`` (plain data, arrays as blobs).

    Raises:
        NotPlainDataError: ``value`` holds something that is not plain data.
    """
    blobs: list[bytes | memoryview] = []
    head = dict(header)
    head["value"] = _encode(value, blobs, path)
    head["blobs"] = [len(b) for b in blobs]
    try:
        hbytes = _dumps(head)
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
        head = _loads(bytes(mv[_HEAD_LEN.size:end]))
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


def wait_readable(fd: int, timeout_s: float | None) -> bool:
    """True once ``fd`` is readable (data, EOF or an error), False after ``timeout_s`` (None: no
    limit). ``poll``, not ``select``: a descriptor numbered 1024 or more (an engine process that holds
    many files or sockets) is fine."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(-1 if timeout_s is None else math.ceil(max(0.0, timeout_s) * 1000)))


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

