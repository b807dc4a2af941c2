"""On-disk cache of text embeddings, keyed by encoder configuration and text hashes.

One file per (encoder configuration, list of texts): ``ROOT/<encoder>-<config hash>/<texts
hash>.pt``. The config hash covers the encoder name, pooling, normalisation, ``max_length``
and truncation side; the texts hash is the sha256 of the per-text sha256 digests, in order.
A list that differs from a cached one in any text (or in order) is encoded again as a whole:
there is no per-text reuse across lists. Files are written atomically (temporary file in the
same directory, then ``os.replace``) and read with ``torch.load(weights_only=True)``; an
unreadable, truncated or mismatching file is reported with a warning and recomputed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import torch
from torch import Tensor

from torchroute.buildable import buildable
from torchroute.data.table import RoutingTable, TableError
from torchroute.io import atomic_write
from torchroute.models.encoders import TextEncoder

CACHE_FORMAT = 1


def default_cache_root() -> Path:
    """``$TORCHROUTE_CACHE/embeddings``, else ``<user cache>/torchroute/embeddings``, the user
    cache being ``$XDG_CACHE_HOME`` or ``~/.cache`` (the same folder in every directory)."""
    base = os.environ.get("TORCHROUTE_CACHE")
    if base:
        return Path(base).expanduser() / "embeddings"
    user = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(user).expanduser() / "torchroute" / "embeddings"


def encoder_key(encoder: TextEncoder) -> str:
    """sha256 (hex) of the encoder's `TextEncoder.spec`."""
    return hashlib.sha256(json.dumps(encoder.spec, sort_keys=True).encode()).hexdigest()


def text_digests(texts: Sequence[str]) -> Tensor:
    """Per-text sha256 digests: ``n`` strings -> ``[n, 32]`` uint8."""
    raw = b"".join(hashlib.sha256(str(t).encode("utf-8")).digest() for t in texts)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).reshape(len(texts), 32)


@buildable
class EmbeddingCache:
    """Compute text embeddings once and reuse them from disk.

    Args:
        root: cache directory (created on first write); default `default_cache_root`.
        batch_size: texts per forward pass when encoding.
        progress: show a progress bar when encoding.

    Shapes:
        ``get_or_compute(encoder, n texts) -> [n, d]`` float32 on the CPU.
    """

    def __init__(
        self, root: Path | str | None = None, batch_size: int = 64, progress: bool = True
    ) -> None:
        self.root = Path(root).expanduser() if root is not None else default_cache_root()
        self.batch_size = batch_size
        self.progress = progress

    def path_for(self, encoder: TextEncoder, texts: Sequence[str]) -> Path:
        """The cache file for this encoder configuration and list of texts."""
        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", encoder.name.rstrip("/\\"))[-60:].strip("._")
        table_hash = hashlib.sha256(text_digests(texts).numpy().tobytes()).hexdigest()
        return self.root / f"{slug or 'encoder'}-{encoder_key(encoder)[:16]}" / f"{table_hash}.pt"

    def get_or_compute(
        self,
        encoder: TextEncoder,
        texts: Sequence[str],
        device: torch.device | str | None = None,
    ) -> Tensor:
        """Embeddings of ``texts`` from the cache, encoding and storing them on a miss.

        Args:
            encoder: the text encoder (its `TextEncoder.spec` is part of the key).
            texts: ``n`` strings.
            device: passed to `TextEncoder.encode` on a miss.

        Returns:
            ``[n, d]`` float32 on the CPU.
        """
        texts = [str(t) for t in texts]
        digests = text_digests(texts)
        path = self.path_for(encoder, texts)
        cached = self._load(path, encoder, digests)
        if cached is not None:
            return cached
        emb = encoder.encode(
            texts, batch_size=self.batch_size, progress=self.progress, device=device
        )
        self._save(path, encoder, digests, emb)
        return emb

    def _load(self, path: Path, encoder: TextEncoder, digests: Tensor) -> Tensor | None:
        if not path.is_file():
            return None
        try:
            blob = torch.load(path, map_location="cpu", weights_only=True)
            emb = blob["embeddings"]
            ok = (
                blob.get("format") == CACHE_FORMAT
                and blob.get("encoder") == encoder.spec
                and torch.equal(blob["text_sha256"], digests)
                and emb.dtype == torch.float32
                and tuple(emb.shape) == (digests.shape[0], encoder.dim)
                and bool(torch.isfinite(emb).all())
            )
        except Exception as err:  # unreadable file: any error from zip/pickle/tensor storage
            warnings.warn(
                f"embedding cache file {path} is unreadable ({type(err).__name__}: {err}); "
                "recomputing it",
                stacklevel=3,
            )
            return None
        if not ok:
            warnings.warn(
                f"embedding cache file {path} does not match the encoder or texts; recomputing",
                stacklevel=3,
            )
            return None
        return emb

    def _save(self, path: Path, encoder: TextEncoder, digests: Tensor, emb: Tensor) -> None:
        blob = {
            "format": CACHE_FORMAT,
            "encoder": encoder.spec,
            "text_sha256": digests,
            "embeddings": emb.detach().float().cpu().contiguous(),
        }
        with atomic_write(path, "wb") as f:
            torch.save(blob, f)

    def __repr__(self) -> str:
        return f"EmbeddingCache(root={str(self.root)!r})"


@buildable
def embed_table(
    table: RoutingTable,
    encoder: TextEncoder,
    cache: EmbeddingCache | Literal[False] | None = None,
) -> RoutingTable:
    """Attach ``encoder`` embeddings of the table's query text.

    Args:
        table: a routing table with ``text`` (``n`` strings).
        encoder: the text encoder.
        cache: an `EmbeddingCache`; ``None`` uses one at `default_cache_root`; ``False``
            encodes without caching.

    Returns:
        The same table with ``embeddings`` ``[n, d]`` (replacing any it had). A table without
        text but with embeddings is returned unchanged.

    Raises:
        TableError: the table has neither text nor embeddings.
    """
    if table.text is None:
        if table.embeddings is not None:
            return table
        raise TableError(
            f"{table.source}: the table has no query text to encode and no embeddings; load it "
            "with its prompt column or attach precomputed embeddings with with_embeddings()"
        )
    if cache is False:
        emb = encoder.encode(table.text)
    else:
        emb = (cache or EmbeddingCache()).get_or_compute(encoder, table.text)
    return table.with_embeddings(emb)
