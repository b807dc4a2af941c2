"""A ``LightningDataModule`` over a :class:`~torchroute.data.table.RoutingTable`.

Two modes:
- **cached embeddings** (the default): batches carry the encoder embeddings ``x [b, d_e]``,
  computed once (``prepare_data``, rank 0) and read back from the
  :class:`~torchroute.models.EmbeddingCache` on every rank (``setup``), or taken from the
  table when it already has embeddings;
- **on-the-fly encoding** (``finetune=True``, when the top encoder layers are trained):
  batches carry the tokenised text ``input_ids`` / ``attention_mask`` ``[b, L]``.

Every batch also carries ``index [b]``, ``scores [b, K]`` and ``costs [b, K]`` (float32).

Rows: the heads are fitted on the table's ``train`` split less a seeded share
``val_fraction`` of it, the *early-stopping* rows (Lightning's validation loop). The table's
own ``val`` split is never read while fitting: a simulation that chooses options on
``split=val`` pre-trains its oracle on the same table, so those queries must stay unseen
(:meth:`RoutingDataModule.rows` ``("val")`` gives them for held-out figures).
"""

from __future__ import annotations

from typing import Any, Literal

import lightning as L
import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from torchroute.data.splits import carve_validation
from torchroute.data.table import RoutingTable, TableError
from torchroute.models.embedding_cache import EmbeddingCache, embed_table
from torchroute.models.encoders import TextEncoder


class _Rows(Dataset):
    """Rows ``index`` of a table: ``{"index", "x" or "text", "scores", "costs"}``."""

    def __init__(
        self,
        index: np.ndarray,
        scores: Tensor,
        costs: Tensor,
        embeddings: Tensor | None,
        text: tuple[str, ...] | None,
    ) -> None:
        self.index, self.scores, self.costs = index, scores, costs
        self.embeddings, self.text = embeddings, text

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, i: int) -> dict[str, Any]:
        row = int(self.index[i])
        item: dict[str, Any] = {"index": row, "scores": self.scores[row], "costs": self.costs[row]}
        if self.embeddings is not None:
            item["x"] = self.embeddings[row]
        else:
            item["text"] = self.text[row]
        return item


class RoutingDataModule(L.LightningDataModule):
    """Train / val / test loaders over a routing table for oracle pre-training.

    Args:
        table: the routing table. It needs embeddings, or text and an ``encoder``.
        encoder: encodes the text (cached mode) or is fine-tuned (``finetune=True``).
        cache: embedding cache; ``None`` uses the default root, ``False`` disables caching.
        finetune: yield tokenised text instead of cached embeddings.
        batch_size: queries per batch.
        val_fraction: share of the train split held out for early stopping (``> 0``).
        seed: seed of that carve-out.
        num_workers: ``DataLoader`` workers.

    Raises:
        TableError: the table has neither text nor embeddings, has text but no encoder was
            given, or lacks a train or test split.
    """

    def __init__(
        self,
        table: RoutingTable,
        encoder: TextEncoder | None = None,
        cache: EmbeddingCache | Literal[False] | None = None,
        finetune: bool = False,
        batch_size: int = 128,
        val_fraction: float = 0.1,
        seed: int = 0,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        if table.text is None and table.embeddings is None:
            raise TableError(
                f"{table.source}: the table has no query text and no embeddings, so there is "
                "nothing to pre-train the oracle on; load it with its text column or attach "
                "embeddings with table.with_embeddings(...)"
            )
        if encoder is None and table.embeddings is None:
            raise TableError(
                f"{table.source}: the table has text but no embeddings; give an "
                "encoder (e.g. torchroute.models.minilm_encoder())"
            )
        if finetune and (encoder is None or table.text is None):
            raise TableError(
                f"{table.source}: fine-tuning the encoder needs the query text and an encoder"
            )
        for split in ("train", "test"):
            table.rows(split)  # raises a TableError naming the empty split
        carved = np.asarray(carve_validation(table.split, val_fraction, seed), dtype=object)
        train = np.asarray(table.split, dtype=object) == "train"
        self._rows = {
            "fit": np.flatnonzero(train & (carved == "train")),
            "early_stopping": np.flatnonzero(train & (carved == "val")),
        }
        for name, idx in self._rows.items():
            if idx.size == 0:
                raise TableError(
                    f"{table.source}: data_module.val_fraction={val_fraction} leaves no "
                    f"{name.replace('_', '-')} rows among the {int(train.sum())} train queries; "
                    "expected a share in (0, 1) that leaves both sides non-empty"
                )
        self.table, self.encoder, self.cache = table, encoder, cache
        self.finetune, self.batch_size, self.num_workers = finetune, batch_size, num_workers
        self._embedded: RoutingTable | None = None

    @property
    def embed_dim(self) -> int:
        """``d_e``: the encoder's output size, else the width of the table's embeddings."""
        if self.encoder is not None:
            return self.encoder.dim
        return int(self.table.embeddings.shape[1])

    def _needs_encoding(self) -> bool:
        return self.encoder is not None and not self.finetune

    def prepare_data(self) -> None:
        """Embed the table into the cache when needed (once, on rank 0)."""
        if self._needs_encoding():
            embed_table(self.table, self.encoder, self.cache)  # fills the cache (rank 0)

    def setup(self, stage: str | None = None) -> None:
        """Load the embeddings and carve the validation split."""
        if self._embedded is None:
            self._embedded = (
                embed_table(self.table, self.encoder, self.cache)
                if self._needs_encoding()
                else self.table
            )

    @property
    def embedded_table(self) -> RoutingTable:
        """The table with the embeddings the oracle reads (after :meth:`setup`)."""
        self.setup()
        return self._embedded

    def rows(self, name: str) -> np.ndarray:
        """Table row indices of ``"fit"`` (the rows the heads are fitted on),
        ``"early_stopping"`` (the carve-out of train), or a table split (``"train"``,
        ``"val"``, ``"test"``; an empty one raises :class:`TableError`)."""
        if name in self._rows:
            return self._rows[name]
        return self.table.rows(name)

    def has_split(self, name: str) -> bool:
        """Whether the table has rows in split ``name``."""
        return name in self.table.split

    def train_costs(self) -> Tensor:
        """Costs of the fitting rows ``[n_fit, K]`` (for the cost head's normalisation)."""
        return self.table.costs[torch.as_tensor(self._rows["fit"])].float()

    def _loader(self, rows: np.ndarray, shuffle: bool) -> DataLoader:
        t = self.embedded_table
        emb = None if self.finetune else t.embeddings
        ds = _Rows(rows, t.scores.float(), t.costs.float(), emb, t.text)
        return DataLoader(
            ds,
            batch_size=self.batch_size,
            shuffle=shuffle,
            num_workers=self.num_workers,
            collate_fn=self._collate,
            persistent_workers=self.num_workers > 0,
        )

    def _collate(self, items: list[dict[str, Any]]) -> dict[str, Tensor]:
        batch = {
            "index": torch.tensor([it["index"] for it in items]),
            "scores": torch.stack([it["scores"] for it in items]),
            "costs": torch.stack([it["costs"] for it in items]),
        }
        if "x" in items[0]:
            batch["x"] = torch.stack([it["x"] for it in items])
        else:
            batch.update(self.encoder.tokenize([it["text"] for it in items]))
        return batch

    def train_dataloader(self) -> DataLoader:
        """Shuffled batches of the fitting rows (train less the early-stopping rows)."""
        return self._loader(self._rows["fit"], shuffle=True)

    def val_dataloader(self) -> DataLoader:
        """Batches of the early-stopping rows (never the table's ``val`` split)."""
        return self._loader(self._rows["early_stopping"], shuffle=False)

    def test_dataloader(self) -> DataLoader:
        """Batches of the test split."""
        return self._loader(self.table.rows("test"), shuffle=False)
