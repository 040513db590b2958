"""Training kernels: losses, the RL step, SFT / DPO through TRL, checkpoints, metrics, data parallelism.

The Python API's ``train`` function is ``creditflow.train`` (:func:`creditflow.api.train`); this package is
what it runs on.
"""
