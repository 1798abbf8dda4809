"""The names a run's Optuna trials and study carry: user attributes and trial config keys.

A leaf (docs/contributing.md, rule 19): the samplers, baseline wrapper, pruners, scheduler,
the race and the readers all need these names, so they live here, where importing them imports
nothing else of ours.
"""

# Optuna user attributes that describe a trial (set in the driver, see samplers.py).
SEED = "seed"
CANDIDATE = "candidate"  # JSON of the full candidate, fixed values included
STANDS_FOR = "stands_for"  # JSON list of the other candidates with the same proxy widths
BASELINE = "tlm_control"  # True on the uniform baseline: a baseline, not a sample
SAMPLED = "tlm_sampled"  # True on a trial whose candidate the sampler drew (not a repeat)
# user attribute and trial config key: True on a trial the pruner may not stop, its candidate one
# of search.unpruned_candidates of its setting drawn at random before any data (they measure a
# pruned study's noise)
UNPRUNED = "tlm_spared"
# study attribute: the unpruned candidates' draw (JSON, as the run dir's unpruned.json holds it),
# written once before the first trial and never drawn again
UNPRUNED_CHOICE = "tlm_spared_choice"
# user attribute and trial config key: "confirm" on a trial of the confirmation stage (a fresh
# seed of search.confirm: the pruner never stops it, and the main stage's evidence leaves it out)
STAGE = "stage"
# study attribute: the confirmation stage's choice (JSON, as the run dir's confirm.json holds
# it), written once before its first trial and never chosen again
CONFIRM_CHOICE = "tlm_confirm_choice"
SAME_AS = "same_as"  # the number of the finished trial whose model (widths, seed) this one is
REPLAY = "replay"  # trial config key: the twin's curve, reported instead of training
ENQUEUED_FLAG = "tlm_enqueued"  # study attribute: the initial queue was written
RETRY_OF = "retry_of"  # the number of the failed trial this one runs again (resume --retry-failed)
# user attribute and trial config key: the checkpoint folder an interrupted trial left, which the
# trial queued in its place continues from (tlmsearch resume)
RESUME_FROM = "resume_from"
NUMBER = "number"  # trial config key: the Optuna trial's number (checkpoints record it)
# Set as a trial ends: by the pruning scheduler (search.keep_weights) and by tlmsearch resume.
WEIGHTS = "weights"  # user attribute: the checkpoint folder of a trial's kept final weights
RESTART_OF = "restart_of"  # the number of the interrupted trial this one runs again (resume)
# user attr of runs recorded before restart_of: a trial whose driver died; it was queued again
INTERRUPTED = "interrupted"
# user attr: the trial was running when SIGTERM stopped the driver (a preemption): resume
# continues it from its checkpoint; neither failed nor lost
PREEMPTED = "preempted"
# Study attribute prefix (the trial's number follows): a trial a dead driver left running before
# it had a candidate, so nothing was queued in its place (tlmsearch resume)
INTERRUPTED_TRIAL = "tlm_interrupted:"
# Study attribute prefix: a race's decision about a candidate (its CANDIDATE JSON follows), set
# once by the driver when the race decides it and never changed (tlmsearch/evidence/racing.py)
RACE_DECISION = "tlm_race:"
