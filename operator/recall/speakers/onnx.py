"""A stack of ONNX LSTM layers as a serialized model, written without the `onnx` package.

    blob = lstm_stack([(w, r, b), ...], inputs=40, hidden=256)
    session = ort.InferenceSession(blob)
    session.run(None, {INPUT: x})   # x: (frames, batch, inputs) → the last layer's final
                                    # hidden state (1, batch, hidden)

Contract: the bytes are an ONNX `ModelProto` (IR version 7, opset 14), encoded field by field
in protobuf's wire format (field numbers from onnx.proto); each layer is one `LSTM` node
(time-major: onnxruntime's kernel has no batch-first layout), its weights in ONNX's gate
order (input, output, forget, cell) with the input and recurrent biases concatenated, as the
operator defines them. Only the final
hidden state of the last layer is an output. A unit test checks the graph against what the
`onnx` package itself would encode (the reference script) and the numbers against Torch.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

INPUT = "mels"
OUTPUT = "hidden"
IR_VERSION = 7
OPSET = 14
FLOAT, INT64 = 1, 7  # TensorProto.DataType
ATTRIBUTE_INT = 2  # AttributeProto.AttributeType

Layer = tuple[npt.NDArray[np.float32], npt.NDArray[np.float32], npt.NDArray[np.float32]]


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # negative int64 values as two's complement, as protobuf does
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _int(field: int, value: int) -> bytes:
    return _varint(field << 3) + _varint(value)


def _bytes(field: int, value: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(value)) + value


def _str(field: int, value: str) -> bytes:
    return _bytes(field, value.encode())


def _tensor(name: str, array: npt.NDArray[np.generic]) -> bytes:
    kind = {np.dtype(np.float32): FLOAT, np.dtype(np.int64): INT64}[array.dtype]
    dims = b"".join(_int(1, d) for d in array.shape)
    raw = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()
    return dims + _int(2, kind) + _str(8, name) + _bytes(9, raw)


def _value_info(name: str, dims: list[int | str]) -> bytes:
    shape = b"".join(_bytes(1, _str(2, d) if isinstance(d, str) else _int(1, d)) for d in dims)
    tensor = _int(1, FLOAT) + _bytes(2, shape)
    return _str(1, name) + _bytes(2, _bytes(1, tensor))


def _node(op: str, inputs: list[str], outputs: list[str], name: str, **ints: int) -> bytes:
    out = b"".join(_str(1, i) for i in inputs) + b"".join(_str(2, o) for o in outputs)
    out += _str(3, name) + _str(4, op)
    for key, value in ints.items():
        out += _bytes(5, _str(1, key) + _int(3, value) + _int(20, ATTRIBUTE_INT))
    return out


def lstm_stack(layers: list[Layer], inputs: int, hidden: int) -> bytes:
    """The model (see the module contract): `layers` as (W, R, B) in Torch's shapes, gates in
    ONNX's order, B the input and recurrent biases concatenated."""
    nodes: list[bytes] = []
    initializers = [_tensor("axis", np.array([1], np.int64))]
    x = INPUT
    for k, (w, r, b) in enumerate(layers):
        initializers += [_tensor(f"W{k}", w[None]), _tensor(f"R{k}", r[None]),
                         _tensor(f"B{k}", b[None])]  # fmt: skip
        last = k == len(layers) - 1
        outputs = ["", OUTPUT] if last else [f"Y{k}"]
        nodes.append(_node("LSTM", [x, f"W{k}", f"R{k}", f"B{k}"], outputs, f"lstm{k}",
                           hidden_size=hidden))  # fmt: skip
        if not last:  # (frames, 1, batch, hidden) → (frames, batch, hidden)
            nodes.append(_node("Squeeze", [f"Y{k}", "axis"], [f"y{k}"], f"squeeze{k}"))
            x = f"y{k}"
    graph = b"".join(_bytes(1, n) for n in nodes) + _str(2, "voice-encoder")
    graph += b"".join(_bytes(5, t) for t in initializers)
    graph += _bytes(11, _value_info(INPUT, ["frames", "batch", inputs]))
    graph += _bytes(12, _value_info(OUTPUT, [1, "batch", hidden]))
    opset = _str(1, "") + _int(2, OPSET)
    return _int(1, IR_VERSION) + _bytes(8, opset) + _bytes(7, graph)
