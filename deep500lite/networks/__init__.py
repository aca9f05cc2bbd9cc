"""The model zoo, built directly as ONNX graphs: ``create_model(name, batch_size, classes=, shape=)``.

The zoo itself (the registry of builders and the convolutional networks) is in
:mod:`deep500lite.networks.zoo`; MobileNet and the transformers register themselves from
:mod:`~deep500lite.networks.mobilenet` and :mod:`~deep500lite.networks.transformer`, and Deep500's
``export_network`` is in :mod:`~deep500lite.networks.deep500`. This package re-exports them.

>>> from deep500lite import networks
>>> net, input_name, output_name = networks.create_model("lenet", 32, classes=10)  # doctest: +SKIP
"""

from deep500lite.networks import mobilenet, transformer, zoo  # noqa: F401 - importing registers their models
from deep500lite.networks.deep500 import export_network
from deep500lite.networks.zoo import *  # noqa: F401,F403 - the zoo's names are the package's
from deep500lite.networks.zoo import CIFAR_RESNET_DEPTHS, IMAGENET_RESNET_LAYERS, VGG_CONFIGS

__all__ = [*zoo.__all__, "export_network", "CIFAR_RESNET_DEPTHS", "IMAGENET_RESNET_LAYERS", "VGG_CONFIGS"]
