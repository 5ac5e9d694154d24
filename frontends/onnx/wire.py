"""Zero-copy views of initializer payloads inside the bytes of an ``.onnx`` file.

The protobuf runtime copies a ``bytes`` field each time Python reads it, so sampling a 1 GB
embedding table to compare it with its transposed copy would copy 2 GB. The file's bytes are
already in memory after reading it, so this walks the protobuf wire format just far enough
(``ModelProto.graph`` -> ``GraphProto.initializer`` -> ``TensorProto.name``/``raw_data``) to
return views into them. Anything unexpected yields no view, never an error: callers then fall
back to the parsed model.
"""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["initializer_payloads"]

_MODEL_GRAPH, _GRAPH_INITIALIZER, _TENSOR_NAME, _TENSOR_RAW = 7, 5, 8, 9


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _fields(buf: memoryview) -> Iterator[tuple[int, memoryview | None]]:
    """(field number, payload for length-delimited fields else None) of one message."""
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, pos = _varint(buf, pos)
            yield number, None
        elif wire == 1:
            pos += 8
            yield number, None
        elif wire == 2:
            n, pos = _varint(buf, pos)
            if pos + n > end:
                raise ValueError("truncated field")
            yield number, buf[pos:pos + n]
            pos += n
        elif wire == 5:
            pos += 4
            yield number, None
        else:
            raise ValueError(f"wire type {wire}")


def initializer_payloads(data: bytes) -> dict[str, memoryview]:
    """Initializer name -> view of its ``raw_data`` in ``data``, for the main graph; {} on anything odd."""
    out: dict[str, memoryview] = {}
    try:
        graphs = [v for num, v in _fields(memoryview(data)) if num == _MODEL_GRAPH and v is not None]
        if len(graphs) != 1:
            return {}
        for num, tensor in _fields(graphs[0]):
            if num != _GRAPH_INITIALIZER or tensor is None:
                continue
            name = raw = None
            for tnum, val in _fields(tensor):
                if tnum == _TENSOR_NAME and val is not None:
                    name = bytes(val).decode("utf-8", "replace")
                elif tnum == _TENSOR_RAW:
                    raw = val
            if name is not None and raw is not None:
                out[name] = raw
    except (ValueError, IndexError):
        return {}
    return out
