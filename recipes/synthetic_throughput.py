"""Training throughput of ResNet-20 on synthetic CIFAR-sized data (speed only, no accuracy goal).

What it measures: samples per second and the per-step time split (data loading,
forward+backward, optimizer update) of one epoch of ResNet-20 training on 1,024 generated
3x32x32 images (10 classes, seeded), batch 64, with no validation. Nothing is downloaded and no
file is needed, so it runs anywhere. The metrics are measured, not judged: the run exits 0
unless training fails. Compare frameworks with `deep500lite compare`, which also tests which
step-time differences are significant.

The optimizer is the numpy reference MomentumOptimizer (the same update everywhere, with one
host round trip per parameter per step); measure a framework's own with
--set optimizer=native.MomentumOptimizer (torch and tensorflow have native optimizers).

How to run it:

    deep500lite run recipes/synthetic_throughput.py                    # torch
    deep500lite run recipes/synthetic_throughput.py --set executor=onnxruntime --set batch_size=128
    deep500lite compare recipes/synthetic_throughput.py --frameworks torch,tensorflow,onnxruntime --repeats 3
    python recipes/synthetic_throughput.py

The numpy reference executor takes minutes for this epoch.
"""

import deep500lite as d5
from deep500lite.recipe import run_recipe

FIXED = {
    'dataset': 'synthetic',
    'dataset_kwargs': dict(shape=(3, 32, 32), classes=10, train_size=1024, test_size=64, seed=0),
    'model': 'resnet',
    'model_kwargs': dict(depth=20),
    'validation_sampler': None,
    'epochs': 1,
}

MUTABLE = {
    'batch_size': 64,
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
