"""LeNet on scikit-learn's digits: test accuracy and training speed, on any framework.

What it measures: LeNet (the zoo's, for 8x8 inputs) trained for 4 epochs on the 1,348 training
images of scikit-learn's handwritten digits (8x8, 10 classes; 449 held out for testing), batch
64, momentum SGD from the numpy reference optimizers (the same update on every executor). The
acceptable metric is a final test accuracy of at least 90%; the run also records every step's
time, throughput, time to 90%, peak memory and every epoch's loss and accuracy. The data ships
with scikit-learn, so nothing is downloaded. About a second per epoch on torch, TensorFlow and
ONNX Runtime on 2 CPU cores, about 30 s per epoch on the numpy reference executor.

How to run it:

    deep500lite run recipes/digits_lenet.py                            # torch (MUTABLE's executor)
    deep500lite run recipes/digits_lenet.py --set executor=onnxruntime --set batch_size=32
    deep500lite run recipes/digits_lenet.py --check-determinism
    deep500lite compare recipes/digits_lenet.py --frameworks torch,tensorflow,onnxruntime,reference
    python recipes/digits_lenet.py                                     # Deep500 style: exit 1 if a metric fails

The bundled copy runs by name too: ``deep500lite run digits_lenet``.
"""

import deep500lite as d5
from deep500lite.frameworks import reference as d5ref
from deep500lite.recipe import run_recipe

# Fixed components: what every run of this benchmark shares.
FIXED = {
    'dataset': 'digits',
    'model': 'lenet',
    'train_sampler': d5.ShuffleSampler,
    'train_sampler_kwargs': dict(seed=3),
    'epochs': 4,
}

# Mutable components: what a run may change (deep500lite run --set KEY=VALUE).
MUTABLE = {
    'batch_size': 64,
    'executor': 'torch',
    'optimizer': d5ref.MomentumOptimizer,
    'optimizer_kwargs': dict(learning_rate=0.05, momentum=0.9),
}

# Acceptable metrics: the final test accuracy must reach 90% (higher is better).
METRICS = [
    (d5.TestAccuracy(), 90),
]

if __name__ == '__main__':
    run_recipe(FIXED, MUTABLE, METRICS) or exit(1)
