"""Experiment trackers: Ray Tune callbacks for MLflow and Weights & Biases (:mod:`.callbacks`),
the facts every tracker logs (:mod:`.facts`) and the study-level summary run (:mod:`.study`)."""
