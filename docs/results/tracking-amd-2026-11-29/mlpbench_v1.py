import deep500lite as d5
FIXED = {'dataset': 'digits', 'model': 'mlp', 'model_kwargs': dict(hidden=(32,)), 'epochs': 2,
         'train_sampler': d5.ShuffleSampler, 'train_sampler_kwargs': dict(seed=1)}
MUTABLE = {'batch_size': 32, 'executor': 'reference', 'optimizer': 'GradientDescent', 'optimizer_kwargs': dict(learning_rate=0.1)}
METRICS = [(d5.TestAccuracy(), None)]
