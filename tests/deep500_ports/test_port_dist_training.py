"""Deep500's ``samples/distributed_training.py``: every distribution mode of the sample on 2 MPI ranks.

One job of our own runs each mode in turn (the sample runs one per launch) with the sample's API
path: ``d5.CommunicationNetwork()`` (rank and size), a reference ``MomentumOptimizer(executor,
'loss', lr, momentum)`` wrapped by ``d5ref.<mode's optimizer>(optimizer, comm)``,
``d5.PartitionedDistributedSampler(d5.ShuffleSampler(dataset, batch), comm)``, a test sampler on
rank 0 only, ``d5.DefaultRunnerEvents`` on rank 0 only, ``d5.DefaultTrainingMetrics() +
[d5.CommunicationVolume()]`` and ``d5.mpi_end_barrier()``. Each rank writes what it ended with;
the tests check learning, equal replicas, the bytes moved and the Horovod mode's error.
"""

import json
import os

import numpy as np
import pytest

from support import mpirun, requires_mpi, write_digits_as_mnist

pytest.importorskip("tensorflow")

RANKS, PER_RANK_STEPS, EPOCHS, BATCH = 2, 8, 6, 32
N_TRAIN = RANKS * PER_RANK_STEPS * BATCH  # 512
WRAPPERS = {"local": None, "dsgd": "ConsistentDecentralized", "pssgd": "ConsistentParameterServer",
            "dpsgd": "ConsistentNeighbors", "asgd": "InconsistentParameterServer", "mavg": "ModelAverageDecentralized"}

JOB = r'''
import json, os, sys
import numpy as np
import deep500lite as d5
import deep500lite.datasets as data
import deep500lite.networks as zoo
import deep500lite.frameworks.reference as ref
import deep500lite.frameworks.tensorflow as tfw

BATCH, EPOCHS, FOLDER = {batch}, {epochs}, os.path.dirname(os.path.abspath(__file__))
WRAPPERS = {wrappers}


def accuracy_and_loss(ex, dataset, scores):
    hits, losses = 0, []
    for k in range(0, len(dataset) // BATCH * BATCH, BATCH):
        rows = dataset[np.arange(k, k + BATCH)]
        out = ex.inference(rows)
        hits += int(np.sum(np.argmax(out[scores], axis=1) == rows["y"]))
        losses.append(float(out["loss"]))
    return hits / (len(dataset) // BATCH * BATCH), float(np.mean(losses))


def one_mode(mode):
    comm = None if WRAPPERS[mode] is None else d5.CommunicationNetwork()
    rank = 0 if comm is None else comm.rank  # without communication every process is a rank 0
    tag = int(os.environ.get("PMI_RANK", "0")) if comm is None else comm.rank
    dims = dict(zip(("classes", "channels", "height", "width"), data.dataset_shape("mnist")))
    net = d5.parser.load_and_parse_model(zoo.export_network("simple_cnn", BATCH, **dims))
    x_name, scores = net.get_input_nodes()[0].name, net.get_output_nodes()[0].name
    learn, check = data.load_dataset("mnist", x_name, "y")
    net.add_operation(d5.ops.LabelCrossEntropy([scores, "y"], "loss"))
    ex = tfw.from_model(net)
    opt = ref.MomentumOptimizer(ex, "loss", 0.05, 0.9)
    if comm is not None:
        opt = getattr(ref, WRAPPERS[mode])(opt, comm)
    learn_sampler = d5.PartitionedDistributedSampler(d5.ShuffleSampler(learn, BATCH), comm)
    check_sampler = d5.ShuffleSampler(check, BATCH) if rank == 0 else None
    events = d5.DefaultRunnerEvents(EPOCHS) if rank == 0 else []
    metrics = d5.DefaultTrainingMetrics() + [d5.CommunicationVolume()]
    start = accuracy_and_loss(ex, check, scores)
    results = d5.test_training(ex, learn_sampler, check_sampler, opt, EPOCHS, BATCH, scores, events=events,
                               metrics=metrics)
    trainable = [p for p, _ in net.gradient("loss")]
    np.savez(os.path.join(FOLDER, f"{{mode}}-{{tag}}.npz"), *ex.network.fetch_tensors(trainable))
    with open(os.path.join(FOLDER, f"{{mode}}-{{tag}}.json"), "w") as f:
        json.dump({{"start": start, "end": accuracy_and_loss(ex, check, scores), "results": results[:2],
                   "sent_received": results[2], "param_bytes": int(sum(v.nbytes for v in ex.network.fetch_tensors(trainable))),
                   "batches": len(learn_sampler), "steps": getattr(opt, "steps", None),
                   "train_loss": [e["train_loss"] for e in results.stats.epochs]}}, f)
    return ex


for mode in sys.argv[1:]:
    last = one_mode(mode)
try:
    tfw.HorovodDistributedOptimizer(tfw.MomentumOptimizer(last, "loss", 0.05, 0.9), d5.CommunicationNetwork())
    horovod = None
except Exception as err:
    horovod = [type(err).__name__, str(err)]
rank = d5.CommunicationNetwork().rank
with open(os.path.join(FOLDER, f"hvd-{{rank}}.json"), "w") as f:
    json.dump(horovod, f)
d5.mpi_end_barrier()
'''


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    folder = tmp_path_factory.mktemp("distributed")
    write_digits_as_mnist(folder / "data" / "mnist", n_train=N_TRAIN, n_test=160)
    script = folder / "modes.py"
    script.write_text(JOB.format(batch=BATCH, epochs=EPOCHS, wrappers=WRAPPERS))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DEEP500LITE_DATA", str(folder / "data"))
        mp.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
        code, out, _ = mpirun(RANKS, script, *WRAPPERS, timeout=420)
    assert code == 0, out[-6000:]
    return folder, out


def _read(folder, mode, rank):
    with open(os.path.join(folder, f"{mode}-{rank}.json")) as f:
        report = json.load(f)
    with np.load(os.path.join(folder, f"{mode}-{rank}.npz")) as arrays:
        report["params"] = [arrays[k] for k in sorted(arrays.files, key=lambda k: int(k.split("_")[1]))]
    return report


@pytest.mark.mpi
@requires_mpi
def test_most_modes_learn_on_every_rank(job):
    """The sample's rate with momentum is at the edge of stability for this network (shuffling is unseeded, as
    in the sample), so a mode may now and then end at chance; four of the six learning on every rank is the bar."""
    folder, out = job
    learned = []
    for mode in WRAPPERS:
        reports = [_read(folder, mode, r) for r in range(RANKS)]
        assert all(len(r["train_loss"]) == EPOCHS and np.isfinite(r["train_loss"]).all() for r in reports), mode
        if all(r["end"][0] > 0.7 and r["end"][1] < 0.6 * r["start"][1] for r in reports):
            learned.append(mode)
    assert len(learned) >= 4, learned
    # rank 0's progress lines, one run per mode (without communication both processes are a rank 0)
    assert out.count("before training:") == len(WRAPPERS) + 1


@pytest.mark.mpi
@requires_mpi
@pytest.mark.parametrize("mode", ["dsgd", "pssgd", "mavg"])
def test_synchronous_modes_end_with_equal_replicas(job, mode):
    folder, _ = job
    first, second = (_read(folder, mode, r)["params"] for r in range(RANKS))
    assert len(first) == 8
    for a, b in zip(first, second):
        assert np.array_equal(a, b)


@pytest.mark.mpi
@requires_mpi
def test_without_communication_the_replicas_differ(job):
    folder, _ = job
    first, second = (_read(folder, "local", r)["params"] for r in range(RANKS))
    assert any(not np.array_equal(a, b) for a, b in zip(first, second))


# bytes each rank sends plus receives per step, in units of the trainable parameters' bytes, on 2 ranks:
# an allreduce and a server round trip move the parameters once each way, the ring exchange twice
TRAFFIC = {"local": 0, "dsgd": 2, "pssgd": 2, "dpsgd": 4, "asgd": 2, "mavg": 2}


@pytest.mark.mpi
@requires_mpi
@pytest.mark.parametrize("mode", list(WRAPPERS))
def test_communication_volume_is_the_parameter_traffic(job, mode):
    folder, _ = job
    for rank in range(RANKS):
        r = _read(folder, mode, rank)
        steps = EPOCHS * (PER_RANK_STEPS if mode != "local" else RANKS * PER_RANK_STEPS)
        assert r["batches"] * EPOCHS == steps
        received = sum(v[0] for v in r["sent_received"].values())
        sent = sum(v[1] for v in r["sent_received"].values())
        assert sent == received and sent + received == TRAFFIC[mode] * r["param_bytes"] * steps, r["sent_received"]
        if mode != "local":
            assert r["steps"] == steps


@pytest.mark.mpi
@requires_mpi
def test_the_horovod_mode_names_the_package(job):
    folder, _ = job
    for rank in range(RANKS):
        with open(os.path.join(folder, f"hvd-{rank}.json")) as f:
            kind, message = json.load(f)
        assert kind == "FrameworkNotAvailableError" and "horovod" in message.lower(), message
