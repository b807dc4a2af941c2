"""Build a :class:`Router` from the output folder of ``torchroute simulate``.

Nothing is rebuilt: the trial's learner, its problem and its state are read back by
:func:`torchroute.run.trained.load_trained` (config node, ``problem.pt``, the checkpoint
holding the trial), the fitted feature map from ``features.pt`` (``weights_only=True``),
and the text encoder from the run's config when its ``_target_`` is trusted. A run of a
subset learner (its problem a :class:`~torchroute.envs.subset.SubsetProblem`) is served
by a :class:`~torchroute.serve.subset_router.SubsetRouter`.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from pathlib import Path

from torchroute.envs.subset.base import SubsetProblem
from torchroute.features import FEATURES_FILE, FeatureMap
from torchroute.run.build import instantiate_node
from torchroute.run.options import ConfigError
from torchroute.run.outdir import PROBLEM_FILE
from torchroute.run.trained import load_trained, run_options, saved_problem
from torchroute.run.trust import check_trusted
from torchroute.serve.router import Router
from torchroute.serve.subset_router import SubsetRouter


def load_router(
    run_dir: str | Path,
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
    with the run's saved feature map and embeds texts with the run's encoder.

    Args:
        run_dir: the ``out_dir`` of ``torchroute simulate``.
        learner: the learner's name in the config; may be left out when there is one.
        rho: the trial's rho (default: the first of ``rhos``).
        seed: the trial's seed (default: the first of ``seeds``).
        state_path: the router's state file (default ``run_dir/serve/<learner>_rho<rho>_
            seed<seed>.pt``); when it exists the router resumes from it.
        fresh: start from a fresh learner (the config's hyper-parameters, no checkpoint).
        encoder: load the run's text encoder (``False``: embeddings only).
        trusted: module prefixes besides torchroute's own whose ``_target_``s may be built
            (a plug-in package the caller trusts).

    Raises:
        FileNotFoundError: no ``config.yaml`` in ``run_dir``.
        CheckpointError: the learner's checkpoint is missing or does not fit.
        ConfigError: an unknown learner or trial, a ``_target_`` that is not torchroute's,
            or a run without a table.
    """
    run_dir = Path(run_dir)
    run_options(run_dir)  # a folder without config.yaml is not a run: say so first
    # refused before any learner is built: a run without the features serving maps
    whole, layout = saved_problem(run_dir)
    subset = isinstance(whole, SubsetProblem)
    has_features = subset or (run_dir / FEATURES_FILE).is_file()
    if not has_features or whole.embed_dim is None:
        raise ConfigError(f"{run_dir}: serving needs a run on a routing table with embeddings")
    read = {run_dir / PROBLEM_FILE: (whole, layout)}
    trained = load_trained(run_dir, learner, rho, seed, fresh=fresh, trusted=trusted, cache=read)
    opts, name = trained.opts, trained.name
    encode = None
    if encoder and opts.encoder is not None and opts.encoder.get("encoder") is not None:
        encoder_node = opts.encoder["encoder"]
        check_trusted(encoder_node, "encoder.encoder", str(run_dir / "config.yaml"), trusted)
        text_encoder = instantiate_node(encoder_node, "encoder.encoder")
        encode = partial(text_encoder.encode, progress=False)
    if state_path is None:
        state_path = run_dir / "serve" / f"{name}_rho{trained.rho:g}_seed{trained.seed}.pt"
    router = SubsetRouter if subset else Router
    return router(
        trained.learner,
        trained.factory,
        trained.problem,
        features=None if subset else FeatureMap.load(run_dir),
        encode=encode,
        state_path=state_path,
        seed=opts.loop_seed,
    )
