"""MobileNetV2 training speed on synthetic 32x32 images (speed only, no accuracy goal), on any executor.

What it measures: samples per second and the per-step time split (data loading,
forward+backward, optimizer update) of one epoch of MobileNetV2 training on 48 generated 3x32x32
images (10 classes, seeded), batch 8 (6 steps), with no validation. The network is the real
MobileNetV2 at width multiplier 1.0 (torchvision layout: 17 inverted residual blocks with 1x1
expansion, 3x3 depthwise convolution (a grouped ``Conv``) and linear 1x1 projection, ReLU6 as
``Clip(0, 6)``, batch normalization; 2.2M parameters with 10 classes, 3.5M with ImageNet's
1000); only the input is smaller than ImageNet's 224x224, so that the numpy reference executor
finishes too. Another width multiplier: ``--set model_kwargs.width=0.5``. Dropout (MobileNetV2's
0.2) is off so that `compare`'s first-step check compares the same computation on every executor
(their dropout masks differ); ``--set model_kwargs.dropout=0.2`` turns it on. Nothing is
downloaded. The metrics are measured, not judged.

The optimizer is the numpy reference MomentumOptimizer (the same update on every executor).

How to run it:

    deep500lite compare recipes/synthetic_mobilenet_v2.py --frameworks reference,torch,tensorflow,onnxruntime
    deep500lite run recipes/synthetic_mobilenet_v2.py --set executor=onnxruntime --set batch_size=16
    python recipes/synthetic_mobilenet_v2.py
"""

import deep500lite as d5
from deep500lite.recipe import run_recipe

FIXED = {
    'dataset': 'synthetic',
    'model': 'mobilenet_v2',
    'validation_sampler': None,
    'epochs': 1,
}

# The sizes are mutable so that smaller or larger versions run from the command line, e.g.
# --set dataset_kwargs.train_size=32 (a benchmark's figures name the sizes they used).
MUTABLE = {
    'dataset_kwargs': dict(shape=(3, 32, 32), classes=10, train_size=48, test_size=16, seed=0),
    'model_kwargs': dict(width=1.0, dropout=0.0),
    'batch_size': 8,
    'executor': 'torch',
    'optimizer': 'MomentumOptimizer',
    'optimizer_kwargs': dict(learning_rate=0.01, momentum=0.9),
}

METRICS = [
    (d5.Throughput(), None),
    (d5.StepTimeBreakdown(), None),
]

if __name__ == '__main__':
    run_recipe(FIXED, MUTABLE, METRICS) or exit(1)
