"""BERT-base-width encoder training speed on synthetic token ids (speed only, no accuracy goal).

What it measures: samples per second and the per-step time split (data loading,
forward+backward, optimizer update) of one epoch of training a BERT sequence classifier on 48
generated sequences of 32 token ids (2 classes, seeded; dataset ``synthetic_tokens``), batch 8
(6 steps), with no validation.

What is BERT-base and what is scaled: the layers are BERT-base's (Devlin et al. 2019): the
30,522-token vocabulary, 512 learned positions and 2 token types, hidden size 768, 12 attention
heads of 64, feed-forward size 3,072 with exact GELU (``Erf``), post-LayerNorm residual blocks,
the pooler (dense + tanh on the first token) and a dense classification head.
Scaled down so that a step takes a few seconds on two CPU cores: 2 encoder layers instead of 12
and sequences of 32 tokens instead of 512 (38.6M parameters instead of 109.5M; the embedding
tables, 23.8M of them, are full size). Dropout (BERT's 0.1) is off so that `compare`'s
first-step check compares the same computation on every executor (their dropout masks differ);
``--set model_kwargs.dropout=0.1`` turns it on. Nothing is downloaded. The metrics are measured,
not judged.

The optimizer is the numpy reference MomentumOptimizer (the same update on every executor).

How to run it:

    deep500lite compare recipes/synthetic_bert.py --frameworks reference,torch,tensorflow,onnxruntime
    deep500lite run recipes/synthetic_bert.py --set executor=onnxruntime --set batch_size=4
    python recipes/synthetic_bert.py
"""

import deep500lite as d5
from deep500lite.recipe import run_recipe

FIXED = {
    'dataset': 'synthetic_tokens',
    'model': 'bert',
    'validation_sampler': None,
    'epochs': 1,
}

# The sizes are mutable so that smaller or larger versions run from the command line, e.g.
# --set dataset_kwargs.train_size=32 (a benchmark's figures name the sizes they used).
MUTABLE = {
    'dataset_kwargs': dict(seq_len=32, classes=2, vocab_size=30522, train_size=48, test_size=16, seed=0),
    'model_kwargs': dict(vocab_size=30522, hidden=768, layers=2, heads=12, intermediate=3072, dropout=0.0),
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
