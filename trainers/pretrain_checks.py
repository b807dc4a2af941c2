"""Value checks of a resolved pretrain config, run before anything is built or written.

The section options are checked by name against the constructors' signatures in
:func:`torchroute.trainers.pretrain.resolve_config`; this module checks their values
(``trainer.max_epochs=0`` would write an untrained oracle, ``module.lr=nan`` fails only after
the wandb run exists) and that ``out_dir`` can be written.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from torchroute.errors import UserError
from torchroute.io import check_writable_folder


class PretrainValueError(UserError, ValueError):
    """A pretrain option has a value of the wrong type or outside its range."""


def _number(
    where: str,
    value: Any,
    *,
    integer: bool = False,
    gt: float | None = None,
    ge: float | None = None,
    lt: float | None = None,
) -> None:
    kind = "an integer" if integer else "a finite number"
    bounds = " ".join(
        b
        for b in (
            f"> {gt}" if gt is not None else "",
            f">= {ge}" if ge is not None else "",
            f"< {lt}" if lt is not None else "",
        )
        if b
    )
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    ok = ok and math.isfinite(value) and (not integer or isinstance(value, int))
    ok = ok and (gt is None or value > gt) and (ge is None or value >= ge)
    ok = ok and (lt is None or value < lt)
    if not ok:
        raise PretrainValueError(f"{where} must be {kind} {bounds}".rstrip() + f", got {value!r}")


#: (section, key) -> keyword arguments of :func:`_number`
NUMBERS: dict[tuple[str, str], dict[str, Any]] = {
    ("trainer", "max_epochs"): {"integer": True, "ge": 1},
    ("trainer", "min_epochs"): {"integer": True, "ge": 0},
    ("trainer", "max_steps"): {"integer": True, "ge": -1},
    ("train", "patience"): {"integer": True, "ge": 0},
    ("train", "unfreeze_layers"): {"integer": True, "ge": 0},
    ("module", "lr"): {"gt": 0},
    ("module", "encoder_lr"): {"gt": 0},
    ("module", "huber_delta"): {"gt": 0},
    ("data_module", "batch_size"): {"integer": True, "ge": 1},
    ("data_module", "val_fraction"): {"ge": 0, "lt": 1},
    ("data_module", "num_workers"): {"integer": True, "ge": 0},
    ("oracle", "hidden"): {"integer": True, "ge": 1},
    ("oracle", "feature_dim"): {"integer": True, "ge": 1},
    ("oracle", "dropout"): {"ge": 0, "lt": 1},
    ("oracle", "clusters"): {"integer": True, "ge": 1},
    ("train", "threads"): {"integer": True, "ge": 1},
    ("train", "prior"): {"ge": 0},
    ("metrics", "clusters"): {"integer": True, "ge": 1},
    ("metrics", "prior"): {"ge": 0},
}


def check_values(cfg: Mapping[str, Any]) -> None:
    """Raise :class:`PretrainValueError` naming ``cfg.<section>.<key>`` for a bad value.

    Checks the numbers of :data:`NUMBERS` that the config sets, ``seed``, the trainer's
    ``accelerator`` and ``devices`` against this machine, and that ``out_dir`` is (or can
    be created as) a writable folder.
    """
    _number("cfg.seed", cfg.get("seed", 0), integer=True, ge=0)
    for (section, key), bounds in NUMBERS.items():
        node = cfg.get(section)
        if isinstance(node, Mapping) and node.get(key) is not None:
            _number(f"cfg.{section}.{key}", node[key], **bounds)
    trainer = cfg.get("trainer")
    if isinstance(trainer, Mapping):
        _check_accelerator(trainer)
    _check_out_dir(cfg.get("out_dir"))


def _check_accelerator(trainer: Mapping[str, Any]) -> None:
    import torch

    accelerator = str(trainer.get("accelerator", "auto")).lower()
    if accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        raise PretrainValueError(
            f"cfg.trainer.accelerator={accelerator} but no CUDA device is available here; "
            "use trainer.accelerator=cpu (or auto)"
        )
    if accelerator == "mps" and not torch.backends.mps.is_available():
        raise PretrainValueError("cfg.trainer.accelerator=mps but MPS is not available here")
    devices = trainer.get("devices", "auto")
    if isinstance(devices, bool) or (
        not isinstance(devices, (int, str, list, tuple))
        or (isinstance(devices, int) and devices < 1 and devices != -1)
        or (isinstance(devices, str) and devices != "auto" and not devices.strip("-").isdigit())
    ):
        raise PretrainValueError(
            f"cfg.trainer.devices must be a count >= 1, -1 (all), a list of indices or "
            f"'auto', got {devices!r}"
        )


def _check_out_dir(out_dir: Any) -> None:
    if out_dir is not None:
        check_writable_folder(str(out_dir), "cfg.out_dir")
