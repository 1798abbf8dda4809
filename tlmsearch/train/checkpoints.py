"""Trial checkpoints and kept weights on disk: one folder each, written atomically.

The one checkpoint service: the trainer's state is saved with :func:`write_checkpoint` (by the
trainable's reporter), a trial continues from :func:`load_checkpoint`; when a trial ends its
checkpoints are thinned by :func:`retain_trial` (``search.keep_weights``, called by the pruning
scheduler); ``tlmsearch resume`` continues an interrupted trial from :func:`resume_point` and
drops what it supersedes (:func:`drop_superseded`); at the end of a run ``keep_weights: best``
keeps the best candidates' weights (:func:`keep_best`); analysis reads :func:`kept_weights`.

A checkpoint folder holds

- ``state.pt``: ``torch.save`` of the run's state
(:meth:`tlmsearch.train.trainer.Trainer.state_dict`):
  key ``"model"`` is the model's state_dict (the raw weights); the optimizer, data position, RNGs,
  curve and counters are the other keys, and ``"average"`` the averaged weights' state with
  ``train.eval_weights`` ema or lawa (:mod:`tlmsearch.train.averaging`);
- ``meta.json``: what the weights are, written last (its presence marks a complete checkpoint):
  ``number`` (the Optuna trial, or null), ``candidate``, ``seed``, ``widths``, ``tokens``,
  ``model`` (the ModelConfig as a dict, ``vocab_size`` filled in), ``arch``, ``final`` (the
  weights of a completed run) and ``bytes`` and ``sha256`` of state.pt.

Ray Tune copies such a folder into the trial's storage (``RUN/ray/session-N/trial_X/
checkpoint_00000K``, search/execution/trainable.py). A folder whose meta is missing or unreadable,
or whose state.pt has another size or checksum, is not a checkpoint: :func:`load_checkpoint`
refuses it and :func:`latest_checkpoint` falls back to the one before.

state.pt holds tensors and plain data only (dicts, lists, tuples, str, int, float, bool, None:
the RNG states as tensors and ints, the data position and the meta as plain data; :func:`plain`
enforces it when a checkpoint is written), so it is read with ``torch.load(weights_only=True)``,
which runs no code from the file: a run dir on a shared file system is written by whoever can
write there, and the sha256 beside state.pt is written by the same hand. A checkpoint an older
tlmsearch wrote with pickled objects in it (numpy scalars, say) is refused with
:class:`UnsafeCheckpoint`; ``--trust-checkpoints`` (``tlmsearch resume``, ``analyze``) loads it
with pickle once, and ``resume`` rewrites it in the safe format (:func:`upgrade`).

For analysis (``tlmsearch analyze``)::

    for w in kept_weights("runs/quickstart"):      # the final weights the study kept
        model, meta = load_model(w["path"])       # rebuilt with build_model, weights loaded
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
from pathlib import Path
from typing import Any

from tlmsearch.errors import ConfigError
from tlmsearch.widths.candidate import IDENTITY, Candidate

STATE = "state.pt"
META = "meta.json"
PREFIX = "checkpoint_"
KEEP_WEIGHTS = ("none", "final", "best", "all")
_META_KEYS = ("candidate", "seed", "widths", "tokens", "model", "bytes", "sha256")
_PLAIN = (str, int, float, bool, bytes, type(None))
TRUST_FLAG = "--trust-checkpoints"


class UnsafeCheckpoint(ConfigError):
    """A checkpoint whose state.pt needs pickle to load (an older tlmsearch wrote it): refused
    unless the user trusts the run dir (``--trust-checkpoints``)."""

    def __init__(self, path: Path, err: BaseException) -> None:
        why = str(err).strip().splitlines()
        detail = next((line for line in why if "Unsupported" in line or "global" in line), "")
        super().__init__(
            f"{path}: this checkpoint holds pickled objects (an older tlmsearch wrote it), and "
            "torch.load(weights_only=True) refuses them"
            + (f" ({detail.strip()})" if detail else "")
            + f"; if you trust everyone who can write this run dir, pass {TRUST_FLAG} (it loads "
            "the file with pickle, which can run code in it, and `resume` rewrites it in the "
            "safe format); else delete the checkpoint folder and the trial trains from zero"
        )


def plain(value: Any, where: str = "state") -> Any:
    """``value`` with numpy scalars made Python numbers; refuses anything but tensors, dicts,
    lists, tuples and plain scalars (what ``torch.load(weights_only=True)`` reads without
    pickle). ``value`` itself, not a copy, when it is plain already (a module's state_dict
    keeps its ``_metadata``).

    >>> import numpy as np
    >>> plain({"loss": np.float64(2.5), "steps": [np.int64(3)]})
    {'loss': 2.5, 'steps': [3]}
    """
    import numpy as np
    import torch

    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, torch.Tensor) or type(value) in _PLAIN:
        return value
    if isinstance(value, (torch.dtype, torch.device, torch.Size)):
        return value
    if isinstance(value, dict):
        out = {k: plain(v, f"{where}[{k!r}]") for k, v in value.items()}
        if all(out[k] is value[k] for k in value):
            return value
        return type(value)(out) if type(value) is not dict else out
    if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        items = [plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return type(value)(items)
    raise TypeError(
        f"{where}: a {type(value).__module__}.{type(value).__qualname__} cannot go into a "
        "checkpoint (tensors, dicts, lists, tuples and plain scalars only: it must load with "
        "torch.load(weights_only=True))"
    )


def load_state(path: str | Path, map_location: str = "cpu", *, trust: bool = False) -> Any:
    """``torch.load`` of a state.pt, tensors and plain data only; one that needs pickle raises
    :class:`UnsafeCheckpoint` unless ``trust`` (the user's ``--trust-checkpoints``)."""
    import torch

    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:  # what weights_only raises for a pickled object
        if not trust:
            raise UnsafeCheckpoint(Path(path), err) from None
    return torch.load(path, map_location=map_location, weights_only=False)  # trusted by the user


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 24):
            h.update(chunk)
    return h.hexdigest()


def _replace(tmp: Path, final: Path) -> None:
    """fsync ``tmp``, then rename it onto ``final`` (atomic on one file system)."""
    with tmp.open("rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, final)


def write_checkpoint(folder: str | Path, state: dict[str, Any], meta: dict[str, Any]) -> Path:
    """Write ``state`` and ``meta`` into ``folder`` (state.pt first, meta.json last, each via a
    temporary file and a rename): a crash at any point leaves no folder that loads."""
    import torch

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    (out / META).unlink(missing_ok=True)  # rewriting: invalid until the new meta lands
    tmp = out / f"{STATE}.tmp"
    torch.save(plain(state), tmp)
    _replace(tmp, out / STATE)
    info = {**meta, "bytes": (out / STATE).stat().st_size, "sha256": _sha256(out / STATE)}
    tmp = out / f"{META}.tmp"
    tmp.write_text(json.dumps(info, indent=1, sort_keys=True))
    _replace(tmp, out / META)
    return out


def read_meta(folder: str | Path, *, verify: bool = False) -> dict[str, Any] | None:
    """The meta of a complete checkpoint, else None. The size of state.pt is always checked;
    its checksum with ``verify`` (reads the whole file)."""
    folder = Path(folder)
    try:
        meta = json.loads((folder / META).read_text())
        size = (folder / STATE).stat().st_size
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or any(k not in meta for k in _META_KEYS):
        return None
    if size != meta["bytes"] or (verify and _sha256(folder / STATE) != meta["sha256"]):
        return None
    return meta


def load_checkpoint(
    folder: str | Path, map_location: str = "cpu", *, trust: bool = False
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(state, meta) of a complete, uncorrupted checkpoint (checksum verified), else None.
    Raises :class:`UnsafeCheckpoint` for one that needs pickle to load, unless ``trust``."""
    meta = read_meta(folder, verify=True)
    if meta is None:
        return None
    try:
        state = load_state(Path(folder) / STATE, map_location, trust=trust)
    except UnsafeCheckpoint:
        raise
    except Exception:  # a file that matches its checksum but does not load: not ours
        return None
    return state, meta


def upgrade(folder: str | Path, *, trust: bool = False) -> bool:
    """Make a checkpoint load with ``weights_only=True``: one that does already is left alone
    (False); an older pickled one is loaded (only with ``trust``, else
    :class:`UnsafeCheckpoint`) and written again in the safe format (True). A folder that is
    not a valid checkpoint is left alone (False)."""
    folder = Path(folder)
    meta = read_meta(folder, verify=True)
    if meta is None:
        return False
    try:
        load_state(folder / STATE, trust=False)
        return False
    except UnsafeCheckpoint:
        if not trust:
            raise
    except Exception:
        return False
    state = load_state(folder / STATE, trust=True)
    kept = {k: v for k, v in meta.items() if k not in ("bytes", "sha256")}
    write_checkpoint(folder, state, kept)
    return True


def checkpoint_dirs(trial_dir: str | Path) -> list[Path]:
    """The ``checkpoint_*`` folders of a trial, valid or not, oldest name first."""
    root = Path(trial_dir)
    return sorted(p for p in root.glob(f"{PREFIX}*") if p.is_dir()) if root.is_dir() else []


def latest_checkpoint(trial_dir: str | Path) -> Path | None:
    """The newest valid checkpoint (most tokens, then latest name) of a trial, else None."""
    found = [(m["tokens"], p) for p in checkpoint_dirs(trial_dir) if (m := read_meta(p))]
    for _, path in sorted(found, reverse=True):
        if read_meta(path, verify=True) is not None:
            return path
    return None


def trial_dirs(run_dir: str | Path) -> list[Path]:
    """Every Ray trial folder of a run, all sessions."""
    from tlmsearch.run_dir import RunDir

    return RunDir(run_dir).trial_dirs()


def kept_weights(run_dir: str | Path) -> list[dict[str, Any]]:
    """The final weights a run kept (``search.keep_weights``), one dict per trial: its meta
    (``number``, ``candidate``, ``seed``, ``widths``, ``tokens``, ``model``, ``arch``, ...) and
    ``path``, the checkpoint folder for :func:`load_model`. Sorted by trial number; the
    checksum is checked by :func:`load_model`, not here (only the size)."""
    out = []
    for trial in trial_dirs(run_dir):
        for path in checkpoint_dirs(trial):
            meta = read_meta(path)
            if meta is not None and meta.get("final"):
                out.append({**meta, "path": str(path)})
    return sorted(out, key=lambda m: (m["number"] is None, m["number"] or 0, m["path"]))


def load_model(
    path: str | Path, device: str = "cpu", *, trust: bool = False
) -> tuple[Any, dict[str, Any]]:
    """The model of a checkpoint folder, rebuilt (``build_model``) with its weights, in eval
    mode, and its meta. Raises ValueError for a folder that is not a valid checkpoint
    (:class:`UnsafeCheckpoint` for a pickled one, unless ``trust``)."""
    from tlmsearch.config import ModelConfig
    from tlmsearch.models import build_model

    loaded = load_checkpoint(path, map_location=device, trust=trust)
    if loaded is None:
        raise ValueError(f"{path}: not a complete checkpoint (meta.json or state.pt bad)")
    state, meta = loaded
    cfg = ModelConfig.model_validate(meta["model"])
    model = build_model(cfg, meta["widths"], int(cfg.vocab_size or 0), seed=int(meta["seed"]))
    model.load_state_dict(state["model"])
    return model.to(device).eval(), meta


# -------------------------------------------------------------------------------------------------
# Retention (search.keep_weights)


def remove(paths: list[Path]) -> int:
    """Delete checkpoint folders; returns how many bytes were freed."""
    freed = 0
    for p in paths:
        freed += sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
        shutil.rmtree(p, ignore_errors=True)
    return freed


def retain(trial_dir: str | Path, keep_weights: str, completed: bool) -> Path | None:
    """Apply ``keep_weights`` to a trial that has ended; returns the final weights kept, if any.

    ``all`` keeps everything; ``none`` nothing; ``final`` and ``best`` keep the final weights of
    a completed trial (``best`` thins them at the end of the run, :func:`keep_only`) and remove
    the intermediate checkpoints, and every checkpoint of a trial that did not complete.
    """
    if keep_weights not in KEEP_WEIGHTS:
        raise ValueError(f"keep_weights: {keep_weights!r} is not one of {KEEP_WEIGHTS}")
    dirs = checkpoint_dirs(trial_dir)
    kept = None
    if completed and keep_weights != "none":
        finals = [p for p in dirs if (m := read_meta(p)) and m.get("final")]
        kept = finals[-1] if finals else None
    if keep_weights != "all":
        remove([p for p in dirs if p != kept])
    return kept


def retain_trial(
    trial_dir: str | Path, keep_weights: str, completed: bool, resumed_from: str | None = None
) -> Path | None:
    """:func:`retain` for a trial of a search that has ended, and for the interrupted trial's
    checkpoint it continued from (``resumed_from``); returns the kept final weights' folder.

    A trial resumed from a *final* checkpoint (the driver died after writing it) trained
    nothing after it and wrote none: that folder holds its final weights.
    """
    kept = retain(trial_dir, keep_weights, completed)
    if resumed_from:
        prior = retain(
            Path(resumed_from).parent, keep_weights, completed=completed and kept is None
        )
        kept = kept if kept is not None else prior
    return kept


def keep_only(
    run_dir: str | Path, numbers: set[int], paths: set[str] | frozenset[str] = frozenset()
) -> list[dict[str, Any]]:
    """``best`` at the end of a run: remove the kept weights of trials not in ``numbers``,
    except the folders in ``paths`` (weights a trial kept that another trial wrote: resumed
    from an interrupted one's final checkpoint, whose meta names the interrupted trial);
    returns those removed."""
    keep = {Path(p).resolve() for p in paths}
    gone = [
        w
        for w in kept_weights(run_dir)
        if w["number"] not in numbers and Path(w["path"]).resolve() not in keep
    ]
    remove([Path(w["path"]) for w in gone])
    return gone


# -------------------------------------------------------------------------------------------------
# Resume (tlmsearch resume) and the end of a run


def _trial_folders(run_dir: str | Path, ray_trial_id: str | None) -> list[Path]:
    """A Ray trial's folders in every session of the run."""
    return [p for p in trial_dirs(run_dir) if ray_trial_id and p.name == f"trial_{ray_trial_id}"]


def resume_point(
    run_dir: str | Path, ray_trial_id: str | None, resumed_from: str | None = None
) -> tuple[Path, int] | None:
    """The newest valid checkpoint a trial left, and its tokens: in its Ray trial folders (any
    session), else the one it had itself resumed from (``resumed_from``)."""
    best: tuple[Path, int] | None = None
    latest = [latest_checkpoint(p) for p in _trial_folders(run_dir, ray_trial_id)]
    for path in [*latest, Path(resumed_from) if resumed_from else None]:
        meta = read_meta(path, verify=True) if path is not None else None
        if meta is not None and (best is None or meta["tokens"] > best[1]):
            best = (path, int(meta["tokens"]))
    return best


def drop_superseded(
    run_dir: str | Path, ray_trial_id: str | None, resumed_from: str | None, keep: Path
) -> int:
    """Remove an interrupted trial's checkpoints other than ``keep`` (the one its requeued
    trial continues from): those in its own folders and the one it had itself resumed from.
    Without this a trial interrupted twice (A -> B -> C) left A's behind for good. Returns the
    bytes freed."""
    folders = _trial_folders(run_dir, ray_trial_id)
    if resumed_from:
        folders.append(Path(resumed_from).parent)
    keep = keep.resolve()
    return remove([c for f in folders for c in checkpoint_dirs(f) if c.resolve() != keep])


def keep_best(run_dir: str | Path, trials: Any, best_params: list[dict[str, Any]]) -> int:
    """``keep_weights: best`` at the end of a run: remove the kept weights of every trial that
    is neither a uniform baseline nor a seed of a best candidate (``best_params``: best.yaml's
    params); returns how many were removed.

    ``trials``: the trials table (run_dir.tables.trials_frame). The trials' ``weights`` attribute
    is left as it is (Optuna refuses to change a finished trial): the trials table names a folder
    only while it exists.
    """
    if trials.empty:
        return 0
    keys = {Candidate(p).identity for p in best_params}
    keep = trials["is_baseline"].astype(bool) | trials[IDENTITY].isin(keys)
    numbers = {int(n) for n in trials.loc[keep, "number"]}
    if "same_as" in trials:  # a replayed twin trained nothing: its twin holds the weights
        numbers |= {int(n) for n in trials.loc[keep, "same_as"].dropna()}
    # the folder each kept trial names: a trial resumed from an interrupted one's final
    # checkpoint keeps weights whose meta names the interrupted trial's number
    paths = set(trials.loc[keep, "weights"].dropna()) - {""} if "weights" in trials else set()
    return len(keep_only(run_dir, numbers, paths))
