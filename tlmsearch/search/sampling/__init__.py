"""Optuna's side of a search: samplers and the search space they draw from, the Ray Tune searcher
that asks and tells Optuna, the pruners and the scheduler that consults them, the baseline
(uniform) kept out of what samplers learn, the storage, and racing's enqueued seeds."""
