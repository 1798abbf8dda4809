"""Ray's side of a search: the trainable that runs one trial (or replays a simulated one), its
workers and resources, the cluster it joins or starts, Slurm scripts, failures and retries, and
the fault injection the tests use."""
