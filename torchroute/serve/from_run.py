"""Build a :class:`Router` from the output folder of ``torchroute simulate``.

Nothing is rebuilt: the run is opened once (:class:`~torchroute.run.folder.RunFolder`:
the trust check, ``problem.pt``, the checkpoint holding the trial, the fitted feature map
of ``features.pt``, all validated and read with ``weights_only=True``), the trial's
learner read back by :func:`torchroute.run.trained.load_trained`, and the text encoder
built from the run's config. A run of a
subset learner (its problem a :class:`~torchroute.envs.subset.SubsetProblem`) is served
by a :class:`~torchroute.serve.subset_router.SubsetRouter`. :func:`load_parts` reads and
builds all of it but the router's state (what ``serve`` and ``gateway`` check before they
touch a state).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from torch import Tensor

from torchroute.envs.subset.base import SubsetProblem
from torchroute.features import FEATURES_FILE
from torchroute.learners.base import Learner
from torchroute.run.build import instantiate_node
from torchroute.run.folder import RunFolder
from torchroute.run.options import ConfigError
from torchroute.run.trained import load_trained
from torchroute.serve.router import Router
from torchroute.serve.subset_router import SubsetRouter
from torchroute.types import Problem


@dataclass
class RouterParts:
    """What a router of a trial is built from, read and built without its state: the
    learner and its factory, the one-trial problem, the feature map, the text encoder."""

    cls: type[Router]
    learner: Learner
    factory: Callable[[Problem], Learner]
    problem: Problem
    features: Callable[[Tensor], Tensor] | None
    encode: Callable[[list[str]], Tensor] | None
    seed: int
    name: str
    rho: float
    trial_seed: int

    def build(self, state_path: str | Path) -> Router:
        """The router, resuming from ``state_path`` when it holds a state."""
        return self.cls(
            self.learner,
            self.factory,
            self.problem,
            features=self.features,
            encode=self.encode,
            state_path=state_path,
            seed=self.seed,
        )


def load_parts(
    folder: RunFolder,
    learner: str | None = None,
    rho: float | None = None,
    seed: int | None = None,
    *,
    fresh: bool = False,
    encoder: bool = True,
) -> RouterParts:
    """The parts of the router of one trial (see :func:`load_router`); nothing is written
    and no state is read."""
    # refused before any learner is built: a run without the features serving maps
    whole = folder.problem
    subset = isinstance(whole, SubsetProblem)
    has_features = subset or (folder.path / FEATURES_FILE).is_file()
    if not has_features or whole.embed_dim is None:
        raise ConfigError(f"{folder.path}: serving needs a run on a routing table with embeddings")
    features = None if subset else folder.feature_map()
    trained = load_trained(folder, learner, rho, seed, fresh=fresh)
    opts = trained.opts
    encode = None
    if encoder and opts.encoder is not None and opts.encoder.get("encoder") is not None:
        # the node passed the run's trust check when the folder was opened
        text_encoder = instantiate_node(opts.encoder["encoder"], "encoder.encoder")
        encode = partial(text_encoder.encode, progress=False)
    return RouterParts(
        SubsetRouter if subset else Router,
        trained.learner,
        trained.factory,
        trained.problem,
        features,
        encode,
        opts.loop_seed,
        trained.name,
        trained.rho,
        trained.seed,
    )


def load_router(
    run_dir: str | Path | RunFolder,
    learner: str | None = None,
    rho: float | None = None,
    seed: int | None = None,
    *,
    state_path: str | Path | None = None,
    fresh: bool = False,
    encoder: bool = True,
    trusted: Iterable[str] = (),
) -> Router:
    """The router of one trial of one learner of a simulate run (a
    :class:`~torchroute.serve.subset_router.SubsetRouter` for a subset learner).

    A trial is one ``(rho, seed)`` pair of the run's grid: ``rho`` is the cost
    sensitivity the router serves, ``seed`` the stream order that trial replayed. The
    router starts from that trial's learner state after the whole stream, maps embeddings
    with the run's saved feature map and embeds texts with the run's encoder. Plain,
    chunked (``trial_chunk``) and torchrun runs are read alike (their shard plan).

    Args:
        run_dir: the ``out_dir`` of ``torchroute simulate``, or the run already opened
            (:class:`~torchroute.run.folder.RunFolder`; its files are not read again).
        learner: the learner's name in the config; may be left out when there is one.
        rho: the trial's rho (default: the first of ``rhos``).
        seed: the trial's seed (default: the first of ``seeds``).
        state_path: the router's state file (default ``run_dir/serve/<learner>_rho<rho>_
            seed<seed>.pt``); when it exists the router resumes from it.
        fresh: start from a fresh learner (the config's hyper-parameters, no checkpoint).
        encoder: load the run's text encoder (``False``: embeddings only).
        trusted: plug-in packages besides torchroute whose classes may be built (when
            ``run_dir`` is a path; an opened run has its own).

    Raises:
        RunFolderMissing: no ``config.yaml`` in ``run_dir``.
        CheckpointError: the learner's checkpoint is missing, damaged or does not fit.
        ConfigError: an unknown learner or trial, a ``_target_`` that is not torchroute's,
            or a run without a table.
    """
    folder = run_dir if isinstance(run_dir, RunFolder) else RunFolder(run_dir, tuple(trusted))
    parts = load_parts(folder, learner, rho, seed, fresh=fresh, encoder=encoder)
    if state_path is None:
        state_path = folder.state_path(parts.name, parts.rho, parts.trial_seed)
    return parts.build(state_path)
