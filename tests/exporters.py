"""Models written by real exporters (torch.onnx.export, tf2onnx), made in the tests.

Each maker returns ``(path, inputs, expected_outputs)``: the ONNX file, a feed dict, and the
outputs of the framework that produced the model, for the same inputs.
"""

from __future__ import annotations

import numpy as np


def torch_cnn(folder, dynamo: bool = False, batch: int = 2):
    """A small CNN exported by ``torch.onnx.export`` (flatten via ``x.view(x.size(0), -1)``)."""
    import torch

    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(1, 4, 3, padding=1)
            self.bn = torch.nn.BatchNorm2d(4)
            self.fc = torch.nn.Linear(4 * 4 * 4, 10)

        def forward(self, x):
            x = torch.nn.functional.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
            x = x.view(x.size(0), -1)  # Shape/Gather/Unsqueeze/Concat/Reshape in the exported graph
            return torch.nn.functional.log_softmax(self.fc(x), dim=1)

    model = Net().eval()
    with torch.no_grad():
        model.bn.running_mean.uniform_(-0.5, 0.5)
        model.bn.running_var.uniform_(0.5, 1.5)
    x = torch.from_numpy(np.random.default_rng(1).standard_normal((batch, 1, 8, 8)).astype(np.float32))
    path = f"{folder}/torch_cnn{'_dynamo' if dynamo else ''}.onnx"
    kwargs = dict(input_names=["x"], output_names=["y"])
    if dynamo:
        torch.onnx.export(model, (x,), path, dynamo=True, **kwargs)
    else:
        torch.onnx.export(model, (x,), path, dynamo=False, dynamic_axes={"x": {0: "N"}, "y": {0: "N"}},
                          opset_version=17, **kwargs)
    with torch.no_grad():
        expected = model(x).numpy()
    return path, {"x": x.numpy()}, {"y": expected}


def keras_cnn(folder, batch: int = 2):
    """A small Keras CNN converted by tf2onnx (NHWC: Transposes, Pad, Shape/Slice/Concat chains)."""
    import keras
    import tensorflow as tf
    import tf2onnx

    keras.utils.set_random_seed(0)
    inp = keras.Input((8, 8, 1), name="x")
    h = keras.layers.ZeroPadding2D(((1, 2), (2, 1)))(inp)
    h = keras.layers.Conv2D(4, 3, activation="relu")(h)
    h = keras.layers.MaxPooling2D(2)(h)
    h = keras.layers.Reshape((-1,))(h)
    out = keras.layers.Dense(10, activation="softmax")(h)
    model = keras.Model(inp, out)
    spec = (tf.TensorSpec((None, 8, 8, 1), tf.float32, name="x"),)

    @tf.function(input_signature=spec)
    def forward(x):
        return model(x)

    proto, _ = tf2onnx.convert.from_function(forward, input_signature=spec, opset=17)
    path = f"{folder}/keras_cnn.onnx"
    with open(path, "wb") as f:
        f.write(proto.SerializeToString())
    x = np.random.default_rng(2).standard_normal((batch, 8, 8, 1)).astype(np.float32)
    expected = model(x).numpy()
    return path, {proto.graph.input[0].name: x}, {proto.graph.output[0].name: expected}
