"""Deep500's sample ``samples/dataset_latency.py`` on deep500lite: the time to load a minibatch.

Written as the sample calls the API (``d5ds.load_dataset(..., batch_size=)``, ``d5.ShuffleSampler``,
``d5.test_sampler`` with ``d5.SamplerEventMetric(d5.WallclockTime())``). Changed: the imports;
the data (MNIST and CIFAR-10 files written from scikit-learn's digits, ``DEEP500LITE_DATA``;
the datasets with no files here, Fashion-MNIST, CIFAR-100 and ImageNet, are left out of the
loop); and ``test_dataset`` returns what ``test_sampler`` returned, so the test can check it.
"""

import pytest
from support import write_digits_as_cifar10, write_digits_as_mnist

import deep500lite as d5
from deep500lite import datasets as d5ds

BATCH_SIZE = 128


@pytest.fixture
def data_files(tmp_path, monkeypatch):
    write_digits_as_mnist(tmp_path / "mnist", n_train=1200, n_test=400)
    write_digits_as_cifar10(tmp_path / "cifar10", n_train=1250, n_test=400)
    monkeypatch.setenv("DEEP500LITE_DATA", str(tmp_path))
    return tmp_path


def test_dataset(dataset_name, wallclock=None):
    print('\n=========================')
    print('Loading dataset', dataset_name)
    sampler, _ = d5ds.load_dataset(dataset_name, 'in', 'label',
                                   batch_size=BATCH_SIZE)
    print('Dataset loaded')
    if dataset_name != 'imagenet':
        sampler = d5.ShuffleSampler(sampler, BATCH_SIZE)

    metrics = [d5.SamplerEventMetric(wallclock or d5.WallclockTime())]
    return d5.test_sampler(sampler, metrics=metrics)


test_dataset.__test__ = False  # the sample's function, called by the tests below


def test_dataset_latency_sample(data_files, capsys):
    results = {}
    for ds in ['mnist', 'cifar10']:
        try:
            results[ds] = test_dataset(ds)
        except ImportError as ex:
            print('Dependency error, skipping dataset %s: %s' % (ds, str(ex)))
    # WallclockTime() is deep500lite's form: one timed batch, its time in seconds
    for ds, [latency] in results.items():
        assert isinstance(latency, float) and 0 < latency < 5, (ds, latency)
    out = capsys.readouterr().out
    assert out.count("SamplerEventMetric: ") == 2 and "Loading dataset cifar10" in out


def test_dataset_latency_with_deep500s_default_reruns(data_files, capsys):
    # Deep500's WallclockTime() defaults, written out: 100 batch loads, averaged over 10 at a time.
    # CIFAR-10 here has 9 batches per epoch, so the loads cross 11 epochs (the sampler restarts).
    for ds in ['mnist', 'cifar10']:
        wallclock = d5.WallclockTime(100, 10)
        [latencies] = test_dataset(ds, wallclock)
        assert len(latencies) == 10 and all(t > 0 for t in latencies), (ds, latencies)
        assert latencies == wallclock.samples
    assert capsys.readouterr().out.count("SamplerEventMetric: ") == 2


def test_missing_dataset_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("DEEP500LITE_DATA", str(tmp_path))
    with pytest.raises(d5.MissingDatasetError, match="fashion_mnist"):
        test_dataset('fashion_mnist')
