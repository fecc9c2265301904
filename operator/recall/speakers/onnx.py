"""A stack of ONNX LSTM layers as a serialized model, built with the `onnx` package's helpers.

    blob = lstm_stack([(w, r, b), ...], inputs=40, hidden=256)
    session = ort.InferenceSession(blob)
    session.run(None, {INPUT: x})   # x: (frames, batch, inputs) → (1, batch, hidden)

Contract: an ONNX `ModelProto` (IR version 7, opset 14), one time-major `LSTM` node per layer
(onnxruntime's kernel has no batch-first layout), weights in ONNX's gate order (input, output,
forget, cell), input and recurrent biases concatenated. The only output is the last layer's
final hidden state. Checked by `onnx`'s checker (the reference script) and against Torch (a
unit test). `onnx` is imported only when a graph is built.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

INPUT = "mels"
OUTPUT = "hidden"
IR_VERSION = 7
OPSET = 14

Layer = tuple[npt.NDArray[np.float32], npt.NDArray[np.float32], npt.NDArray[np.float32]]


def lstm_stack(layers: list[Layer], inputs: int, hidden: int) -> bytes:
    """The model (see the module contract): `layers` as (W, R, B) in Torch's shapes, gates in
    ONNX's order, B the input and recurrent biases concatenated."""
    from onnx import TensorProto, helper, numpy_helper

    nodes = []
    initializers = [numpy_helper.from_array(np.array([1], np.int64), "axis")]
    x = INPUT
    for k, (w, r, b) in enumerate(layers):
        arrays = {f"W{k}": w, f"R{k}": r, f"B{k}": b}
        initializers += [numpy_helper.from_array(a[None], name) for name, a in arrays.items()]
        last = k == len(layers) - 1
        outputs = ["", OUTPUT] if last else [f"Y{k}"]
        nodes.append(helper.make_node("LSTM", [x, f"W{k}", f"R{k}", f"B{k}"], outputs, f"lstm{k}",
                                      hidden_size=hidden))  # fmt: skip
        if not last:  # (frames, 1, batch, hidden) → (frames, batch, hidden)
            nodes.append(helper.make_node("Squeeze", [f"Y{k}", "axis"], [f"y{k}"], f"squeeze{k}"))
            x = f"y{k}"
    graph = helper.make_graph(
        nodes,
        "voice-encoder",
        [helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, ["frames", "batch", inputs])],
        [helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, [1, "batch", hidden])],
        initializers,
    )
    opset = [helper.make_opsetid("", OPSET)]
    model = helper.make_model(graph, opset_imports=opset, ir_version=IR_VERSION)
    return bytes(model.SerializeToString())  # (typed Any in onnx's stubs)
