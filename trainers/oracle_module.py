"""The ``LightningModule`` that pre-trains a :class:`~torchroute.models.MultiHeadOracle`.

Losses (``docs/papers/cabs.md`` (oracles)): L1 or Huber for the accuracy head; for the
propagation head (every arm of each query in turn is the anchor; the loss covers the ``K - 1``
other arms) L1 or Huber on ``Y_j - y_i`` (``output="delta"``) or binary cross-entropy on ``Y_j``
(``output="bce"``); MSE on z-scored costs for the cost head; Adam, lr ``1e-4``. One step
function serves train, val and test.
"""

from __future__ import annotations

from typing import Literal

import lightning as L
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from torchroute.models.heads import MultiHeadOracle

LossName = Literal["l1", "huber"]


def unfreeze_top_layers(encoder: nn.Module, num_layers: int) -> int:
    """Freeze ``encoder`` except its top ``num_layers`` transformer blocks.

    The blocks are the longest ``nn.ModuleList`` whose name ends in ``layer`` or
    ``layers`` (``encoder.layer`` in BERT, MiniLM and DeBERTa-v2). Returns the number of
    trainable parameters left; raises ``ValueError`` when no such list exists.
    """
    for p in encoder.parameters():
        p.requires_grad_(False)
    if num_layers <= 0:
        return 0
    blocks = [
        m
        for name, m in encoder.named_modules()
        if isinstance(m, nn.ModuleList) and name.split(".")[-1] in ("layer", "layers")
    ]
    if not blocks:
        raise ValueError(
            f"found no transformer block list (…layer / …layers) in "
            f"{type(encoder).__name__}; cannot unfreeze its top layers"
        )
    stack = max(blocks, key=len)
    for block in list(stack)[-num_layers:]:
        for p in block.parameters():
            p.requires_grad_(True)
    return sum(p.numel() for p in encoder.parameters() if p.requires_grad)


class OracleModule(L.LightningModule):
    """Trains the accuracy, propagation and cost heads (and the shared feature trunk).

    Args:
        oracle: the heads (its cost head's ``mean``/``std`` must already be set).
        encoder: a text encoder to fine-tune (batches then carry ``input_ids`` and
            ``attention_mask``); ``None`` when batches carry cached embeddings ``x``.
        lr: Adam learning rate of the heads.
        encoder_lr: Adam learning rate of the unfrozen encoder layers.
        weight_decay: Adam weight decay.
        loss: ``"huber"`` (default) or ``"l1"`` for the accuracy head and a ``"delta"``
            propagation head (a ``"bce"`` one is fitted with binary cross-entropy).
        huber_delta: Huber threshold. Scores lie in ``[0, 1]``, so with the default ``1.0``
            the loss is half the squared error for every error up to 1 (huber with 1.0 was
            chosen over l1 on the validation split).
        accuracy_weight, propagation_weight, cost_weight: weights of the three losses.

    Shapes:
        batch: ``x [b, d_e]`` (or ``input_ids``/``attention_mask [b, L]``), ``scores [b, K]``,
        ``costs [b, K]``.
    """

    def __init__(
        self,
        oracle: MultiHeadOracle,
        encoder: nn.Module | None = None,
        lr: float = 1e-4,
        encoder_lr: float = 1e-5,
        weight_decay: float = 0.0,
        loss: LossName = "huber",
        huber_delta: float = 1.0,
        accuracy_weight: float = 1.0,
        propagation_weight: float = 1.0,
        cost_weight: float = 1.0,
    ) -> None:
        super().__init__()
        if loss not in ("l1", "huber"):
            raise ValueError(f"loss must be 'l1' or 'huber', got {loss!r}")
        self.save_hyperparameters(ignore=["oracle", "encoder"])
        self.oracle = oracle
        self.encoder = encoder

    def embed(self, batch: dict[str, Tensor]) -> Tensor:
        """Encoder embeddings ``[b, d_e]`` of a batch."""
        if "x" in batch:
            return batch["x"]
        if self.encoder is None:
            raise ValueError("the batch carries token ids but the module has no encoder")
        return self.encoder(batch["input_ids"], batch["attention_mask"]).float()

    def _regression(self, pred: Tensor, target: Tensor) -> Tensor:
        if self.hparams.loss == "l1":
            return F.l1_loss(pred, target, reduction="none")
        return F.huber_loss(pred, target, reduction="none", delta=self.hparams.huber_delta)

    def losses(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """The three head losses and their weighted sum ``"loss"`` (scalars)."""
        scores = batch["scores"]  # [b, K]
        b, k = scores.shape
        phi = self.oracle.features(self.embed(batch))  # [b, d_phi]
        acc = self._regression(self.oracle.accuracy_head(phi), scores).mean()
        c_z = self.oracle.cost_head.normalized(phi)
        cost = F.mse_loss(c_z, self.oracle.cost_head.normalize(batch["costs"]))
        # Every arm as the anchor: [b*K] rows (query-major), targets Y[x, :] - Y[x, i].
        anchor = torch.arange(k, device=scores.device).repeat(b)
        rows = scores.repeat_interleave(k, 0)  # [b*K, K]
        y_anchor = rows.gather(1, anchor[:, None])[:, 0]
        head = self.oracle.propagation_head
        phi_rows = phi.repeat_interleave(k, 0)  # [b*K, d_phi]
        off = (torch.arange(k, device=scores.device) != anchor[:, None]).to(phi.dtype)
        if head.output == "cooccurrence":  # a counted table: nothing to fit here
            prop = torch.zeros((), dtype=phi.dtype, device=phi.device)
        elif head.output == "bce":  # p^_j = sigmoid(z_j) fitted to Y_j
            z = head.logits(phi_rows, anchor, y_anchor)
            prop_err = F.binary_cross_entropy_with_logits(z, rows, reduction="none")
        else:
            delta = head(phi_rows, anchor, y_anchor)
            prop_err = self._regression(delta, rows - y_anchor[:, None])
        if head.output != "cooccurrence":
            prop = (prop_err * off).sum() / off.sum()
        hp = self.hparams
        total = hp.accuracy_weight * acc + hp.propagation_weight * prop + hp.cost_weight * cost
        return {"loss": total, "accuracy_loss": acc, "propagation_loss": prop, "cost_loss": cost}

    def _shared_step(self, batch: dict[str, Tensor], stage: str) -> Tensor:
        out = self.losses(batch)
        self.log_dict(
            {f"{stage}/{name}": v for name, v in out.items()},
            on_step=False,
            on_epoch=True,
            prog_bar=stage != "test",
            batch_size=batch["scores"].shape[0],
            sync_dist=stage != "train",
        )
        return out["loss"]

    def on_train_epoch_start(self) -> None:
        """Put the encoder in train mode when it is fine-tuned."""
        if self.encoder is not None:  # text encoders are loaded in eval mode
            self.encoder.train()

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        """The summed head losses of a train batch (logged)."""
        return self._shared_step(batch, "train")

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        """The summed head losses of a validation batch (logged)."""
        return self._shared_step(batch, "val")

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        """The summed head losses of a test batch (logged)."""
        return self._shared_step(batch, "test")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        """Adam over the heads (and the unfrozen encoder layers at ``encoder_lr``)."""
        hp = self.hparams
        groups = [{"params": list(self.oracle.parameters()), "lr": hp.lr}]
        if self.encoder is not None:
            trainable = [p for p in self.encoder.parameters() if p.requires_grad]
            if trainable:
                groups.append({"params": trainable, "lr": hp.encoder_lr})
        return torch.optim.Adam(groups, lr=hp.lr, weight_decay=hp.weight_decay)
