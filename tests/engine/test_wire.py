"""The wire format against hostile bytes: every malformed frame is a WireError, never another exception."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from reasearch.engine import _wire


def _body(head: bytes, *blobs: bytes) -> bytes:
    return len(head).to_bytes(4, "big") + head + b"".join(blobs)


def _array_frame(ref: object, blob: bytes) -> bytes:
    return _body(json.dumps({"kind": "ok", "value": {"$nd": ref}, "blobs": [len(blob)]}).encode(), blob)


@pytest.mark.parametrize("descr, shape, data", [
    ("|V0", [10**8], b""),
    ("|S0", [10**8], b""),
    ("<U0", [10**8], b""),
    ("<f8", [10**8], b"\0" * 16),
    ("<f8", [2], b"\0" * 64),
    ("<f8", [0, 3], b"\0" * 8),
    ("<f8", [10**30], b"\0" * 8),
    ("|S4", [4], b"\0" * 16),
    ("<M8[s]", [2], b"\0" * 16),
    ("<c16", [1], b"\0" * 16),
    (">f8", [2], b"\0" * 16),
    ("=f8", [2], b"\0" * 16),
    ("f8", [2], b"\0" * 16),
    ("[('a', '<i4')]", [2], b"\0" * 8),
    ("(2,)<f8", [1], b"\0" * 16),
    ("O", [1], b"\0" * 8),
    ("<f8" * 1000, [1], b"\0" * 8),
    (8, [1], b"\0" * 8),
    (None, [1], b"\0" * 8),
    ("<f8", [-1], b""),
    ("<f8", [True], b"\0" * 8),
    ("<f8", [1.0], b"\0" * 8),
    ("<f8", "1", b"\0" * 8),
    ("<f8", {"0": 1}, b"\0" * 8),
    ("<f8", [1] * 65, b"\0" * 8),
    ("<f8", [[1]], b"\0" * 8),
], ids=["V0", "S0", "U0", "f8-short", "f8-long", "f8-empty-with-data", "f8-huge-shape", "S4", "datetime", "complex",
        "big-endian", "native-marker", "no-order", "structured", "subarray", "object", "long-string", "int-dtype",
        "null-dtype", "negative-dim", "bool-dim", "float-dim", "str-shape", "dict-shape", "65-dims", "nested-shape"])
def test_lying_or_non_numeric_arrays_are_refused(descr: object, shape: object, data: bytes) -> None:
    with pytest.raises(_wire.WireError, match="array blob"):
        _wire.decode_frame(_array_frame([0, descr, shape], data))


@pytest.mark.parametrize("ref", [0, [0], [0, "<f8"], [0, "<f8", [1], 4], [1, "<f8", [1]], [-1, "<f8", [1]],
                                 [True, "<f8", [1]], ["0", "<f8", [1]], None, {"a": 1}])
def test_malformed_array_references_are_refused(ref: object) -> None:
    with pytest.raises(_wire.WireError, match="blob"):
        _wire.decode_frame(_array_frame(ref, b"\0" * 8))


def test_a_numpy_header_is_never_parsed() -> None:
    # An .npy file as the blob of a float64 array: its bytes are data, not a header.
    buf = io.BytesIO()
    np.save(buf, np.arange(3.0))
    raw = buf.getvalue()
    raw += b"\0" * (-len(raw) % 8)
    _, value = _wire.decode_frame(_array_frame([0, "<f8", [len(raw) // 8]], raw))
    assert value.dtype == np.float64 and value.nbytes == len(raw)


@pytest.mark.parametrize("arr", [
    np.arange(12, dtype=np.int64).reshape(3, 4),
    np.asfortranarray(np.linspace(0, 1, 6).reshape(2, 3)),
    np.zeros((0, 5), dtype=np.float32),
    np.array(2.5),
    np.array([True, False, True]),
    np.arange(5, dtype=np.uint8),
    np.arange(4, dtype=">i4"),  # big-endian input travels as little-endian
    np.arange(24, dtype=np.float16).reshape(2, 3, 4)[:, ::2, 1:],  # a strided view travels as its values
    np.zeros((2, 0, 3), dtype=np.int16),
    np.array(True),
    np.longdouble(1) / 3 * np.ones(3, dtype=np.longdouble),
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


_JSON_TEXTS = [
    b'{"a":1}', b' {"a":1} ', b'{"a": [1, 2.5, null, true, "x"]}', '{"a":"\u00e9"}'.encode(),
    '{"a":1}'.encode("utf-16"), '{"a":1}'.encode("utf-32"), b'\xef\xbb\xbf{"a":1}', b'{"a":1}x', b'{"a":1}{}',
    b'', b' ', b'{', b'{"a":}', b'\xff\xfe\x00', b'"\\ud800"', b'[NaN, Infinity, -Infinity]', b'1e400',
    b'{"a":1,"a":2}', b'[' * 100 + b']' * 100,
]


@pytest.mark.parametrize("raw", _JSON_TEXTS)
def test_the_fast_header_parser_accepts_and_refuses_exactly_what_json_loads_does(raw: bytes) -> None:
    try:
        want: object = json.loads(raw)
    except ValueError as exc:
        want = type(exc)
    try:
        got: object = _wire._loads(raw)
    except ValueError as exc:
        got = type(exc)
    assert repr(got) == repr(want)  # repr: NaN != NaN


@pytest.mark.parametrize("obj", [
    {"kind": "ok", "value": [1, 2.5, None, True, False, "x\u00e9\ud800\n\"\\"], "blobs": []},
    {"t": (1.5, None), "n": [float("nan"), float("inf"), -float("inf"), -0.0, 1e308, 5e-324]},
    {"big": 10**40, "neg": -(2**63), "nested": {"a": {"b": [[], {}]}}},
    "just a string", 7, [], None,
])
def test_the_fast_header_writer_writes_what_json_dumps_does(obj: object) -> None:
    assert _wire._dumps(obj) == json.dumps(obj, separators=(",", ":"), allow_nan=True).encode()


def test_the_fast_header_writer_refuses_what_json_dumps_refuses() -> None:
    for bad in ({"x": object()}, {1j: 1}, {"s": {1, 2}}):
        with pytest.raises(TypeError):
            json.dumps(bad, separators=(",", ":"))
        with pytest.raises(TypeError):
            _wire._dumps(bad)
