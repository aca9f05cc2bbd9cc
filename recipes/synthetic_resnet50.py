"""ResNet-50 training speed on synthetic 32x32 images (speed only, no accuracy goal), on any executor.

What it measures: samples per second and the per-step time split (data loading,
forward+backward, optimizer update) of one epoch of ResNet-50 training on 48 generated 3x32x32
images (10 classes, seeded), batch 8 (6 steps), with no validation. The network is the real
ResNet-50 (torchvision layout: 7x7 stride-2 stem, max pooling, bottleneck blocks 3-4-6-3 with
64/128/256/512 widths and 4x expansion, batch normalization, projection shortcuts; 23.5M
parameters with 10 classes, 25.6M with ImageNet's 1000); only the input is smaller than
ImageNet's 224x224 (at 32x32 the last stage works on 1x1 maps), so that
the numpy reference executor also takes seconds per step on two CPU cores. Nothing is downloaded.
The metrics are measured, not judged.

The optimizer is the numpy reference MomentumOptimizer (the same update on every executor).

How to run it:

    deep500lite compare recipes/synthetic_resnet50.py --frameworks reference,torch,tensorflow,onnxruntime
    deep500lite run recipes/synthetic_resnet50.py --set executor=onnxruntime --set batch_size=16
    python recipes/synthetic_resnet50.py
"""

import deep500lite as d5
from deep500lite.recipe import run_recipe

FIXED = {
    'dataset': 'synthetic',
    'model': 'resnet',
    'validation_sampler': None,
    'epochs': 1,
}

# The sizes are mutable so that smaller or larger versions run from the command line, e.g.
# --set dataset_kwargs.train_size=32 (a benchmark's figures name the sizes they used).
MUTABLE = {
    'dataset_kwargs': dict(shape=(3, 32, 32), classes=10, train_size=48, test_size=16, seed=0),
    'model_kwargs': dict(depth=50),
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
