"""A simulate run's out_dir, opened once: :class:`RunFolder`.

Serving (``torchroute serve``, :func:`~torchroute.serve.load_router`), off-policy
evaluation of a checkpoint (``evaluate checkpoint=RUN``) and reading a trained learner
(:func:`~torchroute.run.trained.load_trained`) open a run the same way:

- ``config.yaml`` is read as plain YAML (nothing resolved or built) and every
  ``_target_`` of its learners and encoder is checked once (:mod:`torchroute.run.trust`);
- the options (:class:`~torchroute.run.options.RunOptions`) give the learners and the
  ``rho`` x ``seed`` grid of trials;
- ``problem.pt`` gives the problem of all the run's trials and its layout (torchrun ranks
  and trial chunks), validated (:mod:`torchroute.run.validate`); the shard plan
  (:func:`torchroute.run.shards.plan`) says which checkpoint holds a trial
  (``<learner>[.rank<r>of<W>][.chunk<c>].pt``);
- a checkpoint is read once, checked for its schema and finite values and for having been
  written by the run's configuration (its stored fingerprint).

Every file is read with ``weights_only=True`` and at most once per :class:`RunFolder`.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from torchroute.checkpoint import CheckpointError, load_checkpoint
from torchroute.errors import ConfigError, RunFolderMissing
from torchroute.features import FEATURE_ORACLE_FILE, FEATURES_FILE, FeatureMap
from torchroute.run.build import trial_grid
from torchroute.run.options import RunOptions, fingerprint_of
from torchroute.run.outdir import PROBLEM_FILE
from torchroute.run.shards import plan
from torchroute.run.trust import check_trusted
from torchroute.run.validate import check_checkpoint, check_feature_state, check_problem_payload
from torchroute.types import Problem

#: the ``_target_`` of a pre-trained oracle
PRETRAINED = "torchroute.trainers.load_or_pretrain"


def is_pretrained(target: Any) -> bool:
    """Whether a ``_target_`` names the oracle loader (:data:`PRETRAINED`, however spelled:
    it is resolved as the trust check resolves it, without calling anything)."""
    from torchroute.run.trust import UntrustedTarget, resolve

    if not isinstance(target, str):
        return False
    try:
        obj = resolve(target)
    except UntrustedTarget:
        return False
    name = f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', '')}"
    return name == "torchroute.trainers.pretrain.load_or_pretrain"


def without_pretrain_configs(node: Any) -> Any:
    """A copy of a config node without the ``config`` of its pre-trained oracles
    (``torchroute.trainers.load_or_pretrain`` nodes): it is read only to pre-train."""
    if isinstance(node, dict):
        pretrained = is_pretrained(node.get("_target_"))
        return {
            k: without_pretrain_configs(v)
            for k, v in node.items()
            if not (pretrained and k == "config")
        }
    if isinstance(node, (list, tuple)):
        return [without_pretrain_configs(v) for v in node]
    return node


class RunFolder:
    """The out_dir of a ``torchroute simulate`` run, opened once (see the module docstring).

    Attributes:
        path: the folder.
        config: ``config.yaml`` as plain containers (unresolved).
        options: the run's options (on the CPU).
        trusted: plug-in packages whose classes the run may name (``--trust``).
    """

    def __init__(self, path: str | Path, trusted: tuple[str, ...] = ()) -> None:
        self.path = Path(path)
        self.trusted = tuple(trusted)
        source = self.path / "config.yaml"
        if self.path.is_file():
            raise RunFolderMissing(f"{self.path} is a file; give the out_dir (folder) of a run")
        if not source.is_file():
            raise RunFolderMissing(f"{source} not found: give the out_dir of a simulate run")
        try:
            plain = OmegaConf.to_container(OmegaConf.load(source), resolve=False)
        except Exception as exc:  # YAML or OmegaConf errors: one line
            first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), "")
            raise ConfigError(f"{source} cannot be read: {first}") from None
        if not isinstance(plain, dict):
            raise ConfigError(f"{source} holds no mapping of config keys")
        self._check(plain)  # as written: before any interpolation is resolved
        self.config = plain
        self.options = RunOptions.from_config({**plain, "device": "cpu"}, need_learners=False)
        self._check({"learners": self.options.learners, "encoder": self.options.encoder})
        self._read: dict[Path, Any] = {}

    def _check(self, config: dict[str, Any]) -> None:
        """The trust check of every node the run's learners and encoder build (a
        pre-trained oracle's pretrain config is not: reading a run never pre-trains)."""
        for name, node in (config.get("learners") or {}).items():
            node = without_pretrain_configs(node)
            check_trusted(node, f"learners.{name}", str(self.source), self.trusted)
        if config.get("encoder") is not None:
            check_trusted(config["encoder"], "encoder", str(self.source), self.trusted)

    @cached_property
    def fingerprint(self) -> dict[str, Any]:
        """``config.yaml`` resolved, without its run-time keys: what a checkpoint of the run
        stores as its ``config``."""
        try:
            resolved = OmegaConf.to_container(OmegaConf.create(self.config), resolve=True)
        except Exception as exc:  # an interpolation that does not resolve
            first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), "")
            raise ConfigError(f"{self.source} cannot be resolved: {first}") from None
        return fingerprint_of(resolved)

    @property
    def source(self) -> Path:
        """The run's ``config.yaml``."""
        return self.path / "config.yaml"

    # ------------------------------------------------------------ learners and trials

    def learner_name(self, learner: str | None, flag: str = "learner") -> str:
        """``learner``, checked against the run's learners (the only one when ``None``);
        errors name ``flag`` (``--learner`` for the command line)."""
        names = list(self.options.run_learners)
        if not names:
            raise ConfigError(f"{self.source} has no learners")
        if learner is None:
            if len(names) != 1:
                raise ConfigError(
                    f"the run has learners {names}; choose one with --learner "
                    "(learner=... of load_router in Python)"
                )
            return names[0]
        if learner not in self.options.learners:
            raise ConfigError(f"{flag} {learner!r} is not in the run; its learners: {names}")
        return learner

    def trial_of(
        self, rho: float | None, seed: int | None, flags: bool = False
    ) -> tuple[float, int, int]:
        """``(rho, seed, index)`` of the trial in the run's rho-major grid (default: the
        first rho, the first seed); ``flags``: errors name ``--rho`` / ``--seed``."""
        opts = self.options
        pairs = list(zip(*trial_grid(list(opts.rhos), list(opts.seeds))))
        rho = pairs[0][0] if rho is None else float(rho)
        seed = pairs[0][1] if seed is None else int(seed)
        if flags and rho not in opts.rhos:
            raise ConfigError(f"--rho {rho:g} is not in the run's rhos {list(opts.rhos)}")
        if flags and seed not in opts.seeds:
            raise ConfigError(f"--seed {seed} is not in the run's seeds {list(opts.seeds)}")
        if (rho, seed) not in pairs:
            raise ConfigError(
                f"no trial with rho={rho}, seed={seed} in the run; rhos: {list(opts.rhos)}, "
                f"seeds: {list(opts.seeds)}"
            )
        return rho, seed, pairs.index((rho, seed))

    def state_path(self, learner: str, rho: float, seed: int) -> Path:
        """The default state file of a router serving the trial:
        ``serve/<learner>_rho<rho>_seed<seed>.pt``."""
        return self.path / "serve" / f"{learner}_rho{rho:g}_seed{seed}.pt"

    # ------------------------------------------------------------ files, read once

    def read(self, path: Path) -> dict[str, Any]:
        """The checkpoint-format file ``path`` (``weights_only``), read once."""
        if path not in self._read:
            self._read[path] = load_checkpoint(path)
        return self._read[path]

    @cached_property
    def saved(self) -> tuple[Problem, dict[str, Any]]:
        """``problem.pt``: the problem of all the run's trials and its layout
        (``world_size``, ``trial_chunk``), both validated."""
        path = self.path / PROBLEM_FILE
        if not path.is_file():
            raise ConfigError(
                f"{path} not found: the run was written by an older torchroute; run simulate "
                "again to read it"
            )
        trials = self.options.grid_size
        return check_problem_payload(self.read(path), path, trials)

    @property
    def problem(self) -> Problem:
        """The problem of all the run's trials (``problem.pt``)."""
        return self.saved[0]

    @property
    def layout(self) -> dict[str, Any]:
        """How the run split its trials (``world_size``, ``trial_chunk``)."""
        return self.saved[1]

    def checkpoint_of(self, name: str, trial: int) -> tuple[Path, int, int]:
        """``(checkpoint, index of the trial in it, trials it holds)`` of learner ``name``,
        from the run's shard plan (a plain, chunked or torchrun run)."""
        whole, layout = self.saved
        world = int(layout["world_size"])
        for rank in range(world):
            for piece in plan(whole.num_trials, layout["trial_chunk"], world, rank):
                if piece.start <= trial < piece.stop:
                    path = self.path / "checkpoints" / piece.checkpoint_name(name)
                    return path, trial - piece.start, piece.stop - piece.start
        raise ConfigError(f"trial {trial} is not in the run's {whole.num_trials} trials")

    def checkpoint(self, name: str, trial: int) -> tuple[dict[str, Any], Path, int, int]:
        """The checkpoint holding trial ``trial`` of learner ``name``, checked: its schema,
        finite tensors, and the run's configuration as its fingerprint."""
        path, index, size = self.checkpoint_of(name, trial)
        if not path.is_file():
            raise CheckpointError(
                f"checkpoint {path} does not exist; serve with --fresh for a new learner"
            )
        payload = self.read(path)
        check_checkpoint(payload, path, name, self.fingerprint)
        return payload, path, index, size

    def feature_map(self) -> FeatureMap:
        """The feature map the run fitted (``features.pt``, and ``feature_oracle.pt`` for
        oracle features), checked against the run's embedding size."""
        path = self.path / FEATURES_FILE
        payload = self.read(path)
        if not isinstance(payload, dict) or "features" not in payload:
            raise CheckpointError(f"{path} is not a feature map (expected the entry 'features')")
        state = check_feature_state(payload["features"], path, self.problem.embed_dim)
        oracle = None
        if state["source"] == "oracle":
            from torchroute.models.oracles import load_oracle

            oracle = load_oracle(self.path / FEATURE_ORACLE_FILE)
        return FeatureMap(
            state["mean"],
            state["components"],
            oracle=oracle,
            bias=state["bias"],
            normalize=state["normalize"],
            source=state["source"],
        )


__all__ = ["RunFolder", "RunFolderMissing"]
