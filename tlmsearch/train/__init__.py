"""Training: one proxy run (`loop.train_proxy` around a `trainer.Trainer`), its runtime,
loss, averaging, divergence rule, data-parallel workers, checkpoints, parametrization, MFU and
trial arrays. No ray, no optuna. See docs/contributing.md, "Package layout".
"""
