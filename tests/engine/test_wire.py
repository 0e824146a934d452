"""The wire format against hostile bytes: every malformed frame is a WireError, never another exception."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from reasearch.engine import _wire


def _body(head: bytes, *blobs: bytes) -> bytes:
    return len(head).to_bytes(4, "big") + head + b"".join(blobs)


def _npy(descr: str, shape: tuple[int, ...], data: bytes) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": shape})
    return buf.getvalue() + data


def _array_frame(blob: bytes) -> bytes:
    return _body(json.dumps({"kind": "ok", "value": {"$nd": 0}, "blobs": [len(blob)]}).encode(), blob)


@pytest.mark.parametrize("descr, shape, data", [
    ("|V0", (10**8,), b""),
    ("|S0", (10**8,), b""),
    ("<U0", (10**8,), b""),
    ("<f8", (10**8,), b"\0" * 16),
    ("<f8", (2,), b"\0" * 64),
    ("<f8", (0, 3), b"\0" * 8),
    ("|S4", (4,), b"\0" * 16),
    ("<M8[s]", (2,), b"\0" * 16),
    ("<c16", (1,), b"\0" * 16),
    (">f8", (2,), b"\0" * 16),
    ("[('a', '<i4')]", (2,), b"\0" * 8),
], ids=["V0", "S0", "U0", "f8-short", "f8-long", "f8-empty-with-data", "S4", "datetime", "complex", "big-endian",
        "structured"])
def test_lying_or_non_numeric_arrays_are_refused(descr: str, shape: tuple[int, ...], data: bytes) -> None:
    if descr.startswith("["):
        descr = eval(descr)  # a structured dtype's descr is a list
    with pytest.raises(_wire.WireError, match="array blob"):
        _wire.decode_frame(_array_frame(_npy(descr, shape, data)))


def test_truncated_or_garbage_npy_header_is_refused() -> None:
    with pytest.raises(_wire.WireError, match="bad array blob"):
        _wire.decode_frame(_array_frame(b"\x93NUMPY\x01\x00\xff\xff{"))
    with pytest.raises(_wire.WireError, match="bad array blob"):
        _wire.decode_frame(_array_frame(b"not an npy at all"))


@pytest.mark.parametrize("arr", [
    np.arange(12, dtype=np.int64).reshape(3, 4),
    np.asfortranarray(np.linspace(0, 1, 6).reshape(2, 3)),
    np.zeros((0, 5), dtype=np.float32),
    np.array(2.5),
    np.array([True, False, True]),
    np.arange(5, dtype=np.uint8),
    np.arange(4, dtype=">i4"),  # big-endian input travels as little-endian
])
def test_plain_number_arrays_round_trip(arr: np.ndarray) -> None:
    head, value = _wire.decode_frame(_wire.encode_frame({"kind": "ok"}, {"a": arr})[_wire.FRAME_LEN.size:])
    out = value["a"]
    assert out.shape == arr.shape
    assert out.dtype == arr.dtype.newbyteorder("=") if arr.dtype.byteorder == ">" else out.dtype == arr.dtype
    assert np.array_equal(out, arr)
    out[...] = out  # owned and writable, as np.load's arrays are


@pytest.mark.parametrize("arr", [np.array(["a", "b"]), np.zeros(2, dtype="V0"), np.array([1 + 2j]),
                                 np.zeros(2, dtype="M8[s]")])
def test_non_numeric_arrays_are_not_plain_data(arr: np.ndarray) -> None:
    with pytest.raises(_wire.NotPlainDataError, match="dtype"):
        _wire.encode_frame({}, arr)


@pytest.mark.parametrize("head", [
    b"[" * 100_000 + b"]" * 100_000,
    b'{"kind": "ok", "blobs": [], "value": ' + b"[" * 5000 + b"]" * 5000 + b"}",
    b'{"kind": "ok", "blobs": [], "value": ' + b'{"a": ' * 3000 + b"1" + b"}" * 3000 + b"}",
    b'{"kind": "ok", "blobs": [], "value": {"$nd": 7}}',
    b'{"kind": "ok", "blobs": [], "value": {"$b": -1}}',
    b'{"kind": "ok", "blobs": [], "value": {"$d": [1]}}',
    b'{"kind": "ok", "blobs": 5}',
    b'{"kind": "ok", "blobs": [3]}',
    b'"a string"',
    b"\xff\xfe",
])
def test_malformed_frames_raise_wire_error_only(head: bytes) -> None:
    with pytest.raises(_wire.WireError):
        _wire.decode_frame(_body(head))


def test_value_nested_past_the_stack_is_a_wire_error() -> None:
    import sys

    head = b'{"kind": "ok", "blobs": [], "value": ' + b"[" * 400 + b"]" * 400 + b"}"
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(300)
    try:
        with pytest.raises(_wire.WireError, match="nested too deeply"):
            _wire.decode_frame(_body(head))
    finally:
        sys.setrecursionlimit(limit)
