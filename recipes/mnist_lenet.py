"""LeNet on MNIST: test accuracy and training speed on the classic 60,000-image benchmark.

What it measures: the zoo's LeNet trained for 2 epochs on MNIST (28x28 grey images, 10
classes; 60,000 for training, the 10,000 test images for validation), batch 64, momentum SGD
from the numpy reference optimizers (the same update on every executor). The acceptable metric
is a final test accuracy of at least 98%. Every step's time, the throughput, the time to 98%,
peak memory and each epoch's loss and accuracy go to the results file.

The data is not downloaded: put the four IDX files (train-images-idx3-ubyte.gz,
train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz, from
http://yann.lecun.com/exdb/mnist/ or https://ossci-datasets.s3.amazonaws.com/mnist/) in
$DEEP500LITE_DATA/mnist or ~/.cache/deep500lite/data/mnist; without them the run stops with
an error naming the exact path expected.

How to run it:

    deep500lite run recipes/mnist_lenet.py                              # torch
    deep500lite run recipes/mnist_lenet.py --set executor=onnxruntime
    deep500lite compare recipes/mnist_lenet.py --frameworks torch,tensorflow,onnxruntime
    python recipes/mnist_lenet.py

The numpy reference executor works too but takes tens of minutes per epoch.
"""

import deep500lite as d5
from deep500lite.frameworks import reference as d5ref
from deep500lite.recipe import run_recipe

FIXED = {
    'dataset': 'mnist',
    'model': 'lenet',
    'train_sampler': d5.ShuffleSampler,
    'train_sampler_kwargs': dict(seed=1),
    'epochs': 2,
}

MUTABLE = {
    'batch_size': 64,
    'executor': 'torch',
    'optimizer': d5ref.MomentumOptimizer,
    'optimizer_kwargs': dict(learning_rate=0.01, momentum=0.9),
}

METRICS = [
    (d5.TestAccuracy(), 98),
]

if __name__ == '__main__':
    run_recipe(FIXED, MUTABLE, METRICS) or exit(1)
