"""Recipes: Deep500's fixed components + mutable components + acceptable metrics.

A recipe is three objects, usually the module-level names of a Python file::

    import deep500lite as d5
    from deep500lite.frameworks import reference as d5ref

    FIXED = {'dataset': 'digits', 'model': 'lenet', 'train_sampler': d5.ShuffleSampler,
             'train_sampler_kwargs': dict(seed=3), 'epochs': 8}
    MUTABLE = {'batch_size': 64, 'executor': 'torch', 'optimizer': d5ref.MomentumOptimizer,
               'optimizer_kwargs': dict(learning_rate=0.05, momentum=0.9)}
    METRICS = [(d5.TestAccuracy(), 90)]

    if __name__ == '__main__':
        d5.run_recipe(FIXED, MUTABLE, METRICS) or exit(1)

:func:`run_recipe` builds every component, trains, and returns whether every acceptable metric
holds. ``deep500lite run RECIPE.py`` does the same from the command line (reading the three
names without running the file's ``__main__`` block), and may change mutable keys only.

Keys (the same in ``FIXED`` and ``MUTABLE``; a key appears in at most one of them):

==========================  ====================================================================
``dataset``                 a name (:func:`deep500lite.datasets.list_datasets`) or a callable
                            ``f(input_node, label_node, *args, **kwargs) -> (train, test)``
``model``                   a zoo name (:func:`deep500lite.networks.list_models`), an ``.onnx``
                            path, or a callable returning a Network or ``(network, input, output)``
``executor``                a framework name (``reference``, ``torch``, ``tensorflow``,
                            ``onnxruntime``) or a callable ``f(network, *args, **kwargs)``
                            such as ``deep500lite.frameworks.torch.from_model``
``train_sampler``           a sampler class or its name (default ``ShuffleSampler``)
``validation_sampler``      a sampler class or its name (default ``OrderedSampler`` keeping the
                            last partial batch)
``optimizer``               an optimizer class or its name: ``'MomentumOptimizer'`` is the numpy
                            reference one (works on every executor), ``'native.MomentumOptimizer'``
                            the executor's own framework's, ``'torch.MomentumOptimizer'`` torch's
``events``                  training events: a list of event objects or classes, or one class,
                            name or callable (with ``events_args``/``events_kwargs``)
``distributed``             a distributed optimizer wrapping ``optimizer`` (Level 3): its name
                            (``'ConsistentDecentralized'``, ...) or class; makes the run
                            data-parallel over MPI ranks (``deep500lite run RECIPE -n N``)
``communicator``            ``'mpi'`` (default) or ``'torch'`` (torch.distributed), or a callable
                            returning a :class:`~deep500lite.lv3.communication.CommunicationNetwork`
``epochs``, ``batch_size``  integers: epochs from 0 to 1,000,000 (more is a typo, not a plan),
                            batch size from 1 to 2**31 - 1
``<key>_args``              positional arguments of the component (a list or tuple)
``<key>_kwargs``            keyword arguments of the component (a dict)
==========================  ====================================================================

Deep500's singular spellings ``<key>_arg`` and ``<key>_kwarg`` are read as ``<key>_args`` and
``<key>_kwargs``. ``dataset``, ``model``, ``executor``, ``optimizer``, ``epochs`` and
``batch_size`` are required.

How components are called (the recipe's arguments first, then what deep500lite fills in for
parameters the recipe leaves out and the callable declares)::

    train, test = load_dataset(name, "input", "label", *dataset_args, **dataset_kwargs)
    network, input, output = create_model(name, batch_size, *model_args, classes=, shape=, seed=, **model_kwargs)
    network.add_operation(dataset_loss(name)([output, "label"], "loss"))   # unless it has a "loss" output
    executor = d5.executor(network, framework, *executor_args, seed=, **executor_kwargs)
    train_sampler = cls(train, batch_size, *train_sampler_args, seed=, **train_sampler_kwargs)
    validation_sampler = cls(test, batch_size, *validation_sampler_args, **validation_sampler_kwargs)
    optimizer = cls(executor, *optimizer_args, **optimizer_kwargs)
    optimizer = distributed(optimizer, communicator, *distributed_args, **distributed_kwargs)  # if set

With ``distributed``, ``batch_size`` is per rank (the global batch is ``batch_size`` times the
ranks), the training sampler defaults to
:class:`~deep500lite.lv3.sampler.PartitionedDistributedSampler` and gets ``comm=`` when it takes
one, every rank evaluates the whole validation set with its own replica, and a run on ``P > 1``
ranks writes its results to ``OUT/rank<r>/`` (``deep500lite run -n`` aggregates them).

Acceptable metrics: ``(metric, threshold)`` holds when the measured value is at least the
threshold for a metric where higher is better (``metric.higher_is_better``: accuracy,
throughput) and at most the threshold where lower is better (time, memory);
``(metric, threshold, 'higher')`` or ``'lower'`` states the direction explicitly; a metric
whose class does not set ``higher_is_better`` (a custom one) must state it, or the recipe is
refused. Accuracy
metrics (:class:`~deep500lite.metrics.training.TestAccuracy`,
:class:`~deep500lite.metrics.training.TrainingAccuracy`) measure percent, so Deep500's
``(d5.TestAccuracy(), 90)`` means 90%; a threshold from 0 to 1 for them is read as a fraction
(``0.9`` is 90%). ``(metric, None)`` or a bare metric is measured and recorded, not judged.

Seeds: one run seed (``seed=``, default 0) seeds every component whose seed the recipe does not
set: the model's weights, the executor's dropout generator, the training sampler (the
validation sampler gets ``seed + 1``), and the global ``random``/``numpy.random`` generators
(and torch's and TensorFlow's when they are imported). Seeds the recipe sets are kept; every
seed used is recorded in the results. The recipe's dicts, lists and objects are never modified:
each run works on deep copies of the arguments (so seeded transforms start afresh in every run).

The package, one module per job (each imports only the ones before it):

=====================  ===================================================================
:mod:`.keys`           the recipe keys and their checks; describing and copying values
:mod:`.verdicts`       acceptable metrics and verdicts (:func:`metric_name`)
:mod:`.resolution`     FIXED + MUTABLE + overrides -> :class:`ResolvedRecipe`; component names
:mod:`.loading`        recipe files and bundled recipes (:func:`load_recipe`), ``--set``
:mod:`.components`     building the dataset, network, executor, samplers, optimizer, events
:mod:`.divergence`     the first step's differences from the reference executor
:mod:`.results_schema` the JSON Schema of results files, checked before any reader uses one
:mod:`.staging`        a run's results folder written aside and swapped in whole at the end
:mod:`.results`        results files (JSON) and MLPerf-style log lines
:mod:`.running`        :func:`train_recipe` and :func:`run_recipe`
:mod:`.determinism`    :func:`check_determinism`
:mod:`.compare`        ``deep500lite compare``: one recipe on several frameworks, statistics
:mod:`.report`         tables and plots of results files
:mod:`.distributed`    ``deep500lite run -n``: MPI jobs of a recipe and their aggregate
:mod:`.worker`         ``python -m deep500lite.recipe.worker``: one run in one process (what
                       ``compare`` and ``run -n`` start)
=====================  ===================================================================
"""

from deep500lite.recipe.components import COMMUNICATORS
from deep500lite.recipe.determinism import DeterminismReport, check_determinism
from deep500lite.recipe.divergence import first_step_divergence
from deep500lite.recipe.keys import COMPONENT_KEYS, RECIPE_KEYS, REQUIRED_KEYS
from deep500lite.recipe.loading import Recipe, load_recipe, parse_set
from deep500lite.recipe.resolution import ResolvedRecipe, resolve_recipe
from deep500lite.recipe.running import EpochLines, RecipeRun, run_recipe, train_recipe
from deep500lite.recipe.verdicts import AcceptableMetric, Verdict, metric_name

__all__ = ["run_recipe", "train_recipe", "resolve_recipe", "load_recipe", "parse_set", "check_determinism",
           "first_step_divergence", "Recipe", "ResolvedRecipe", "AcceptableMetric", "Verdict", "RecipeRun",
           "DeterminismReport", "EpochLines", "metric_name", "RECIPE_KEYS", "COMPONENT_KEYS", "REQUIRED_KEYS",
           "COMMUNICATORS"]
