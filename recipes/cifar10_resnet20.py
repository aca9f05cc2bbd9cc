"""ResNet-20 on CIFAR-10 with data augmentation: accuracy, time to accuracy and training speed.

What it measures: the zoo's ResNet-20 (He et al. 2016, option-B shortcuts) trained for 30 epochs
on CIFAR-10 (32x32 colour images, 10 classes; 50,000 for training, the 10,000 test images for
validation), batch 128, momentum SGD (reference optimizer, learning rate 0.1, divided by 10 at
epochs 15 and 25, weight decay 5e-4 as a gradient modifier). Training batches are augmented the
standard way: a random 32x32 crop of the image padded by 4 pixels, a random horizontal flip,
then per-channel normalization (the test set is only normalized); every transform has its own
seed, so runs are reproducible. The acceptable metric is a final test accuracy of at least 85%
(ResNet-20 reaches about 91% with the full 182-epoch schedule; this shorter one was not measured
in this repository). The time to 85% is recorded too.

The data is not downloaded: extract https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz into
$DEEP500LITE_DATA/cifar10 or ~/.cache/deep500lite/data/cifar10 (cifar-10-batches-bin/ with
data_batch_1.bin .. data_batch_5.bin and test_batch.bin); without it the run stops with an error
naming the exact path expected.

How to run it (on a GPU: --set executor_kwargs="{'device': 'gpu:0'}"):

    deep500lite run recipes/cifar10_resnet20.py                          # torch
    deep500lite run recipes/cifar10_resnet20.py --set executor=tensorflow --set batch_size=64
    deep500lite compare recipes/cifar10_resnet20.py --frameworks torch,tensorflow,onnxruntime
    python recipes/cifar10_resnet20.py

This is hours of CPU time per framework; the numpy reference executor is far too slow for it.
"""

import deep500lite as d5
from deep500lite.frameworks import reference as d5ref
from deep500lite.frameworks.reference.transforms import Normalize, RandomCrop, RandomHorizontalFlip
from deep500lite.recipe import run_recipe

MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)


def weight_decay(name, param, grad):
    """L2 weight decay 5e-4 added to every trainable parameter's gradient."""
    return grad + 5e-4 * param


FIXED = {
    'dataset': 'cifar10',
    'model': 'resnet',
    'model_kwargs': dict(depth=20),
    'train_sampler': d5.ShuffleSampler,
    'train_sampler_kwargs': dict(seed=1, transformations=[RandomCrop(32, padding=4, seed=2),
                                                          RandomHorizontalFlip(seed=3),
                                                          Normalize(MEAN, STD)]),
    'validation_sampler': d5.OrderedSampler,
    'validation_sampler_kwargs': dict(drop_last_batch=False, transformations=[Normalize(MEAN, STD)]),
    'events': [d5.EpochHPSchedule(learning_rate=[(0, 0.1), (15, 0.01), (25, 0.001)])],
    'epochs': 30,
}

MUTABLE = {
    'batch_size': 128,
    'executor': 'torch',
    'optimizer': d5ref.MomentumOptimizer,
    'optimizer_kwargs': dict(learning_rate=0.1, momentum=0.9, gradient_modifier=weight_decay),
}

METRICS = [
    (d5.TestAccuracy(), 85),
    (d5.TimeToAccuracy(85), None),
]

if __name__ == '__main__':
    run_recipe(FIXED, MUTABLE, METRICS) or exit(1)
