"""Gateway keys and their spend caps.

A keys file (YAML) names each key and holds its sha256, never the key itself:

```yaml
keys:
  alice: {sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08, cap: 5.0}
  bob: {sha256: ..., budget: 0.002}
  ops: {sha256: ..., admin: true}
```

``cap`` (optional) is the most the key may spend, in the backends' cost units; ``budget``
(optional, ``> 0``) is the key's spend target, a mean cost per request: a pacer sets the rho
of the key's requests from its spend so far (:mod:`torchroute.serve.pacer`); ``admin``
keys see every key's spend in ``GET /v1/usage``. One ``--token`` is a single key named
``token`` without a cap. A request is refused (429) before any backend call when the key's
spend, plus what the key's calls still running hold, plus what the request must hold (the
most it can cost: :mod:`torchroute.gateway.spend`) would exceed the cap; calls running
together can so never spend past it.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from torchroute.errors import BudgetError as BudgetError
from torchroute.errors import KeysError as KeysError

_HEX = re.compile(r"[0-9a-f]{64}")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
#: the fields of a key entry
_FIELDS = ("sha256", "cap", "budget", "admin")


@dataclass(frozen=True)
class Key:
    """A gateway key: its name, the sha256 of the secret, its cap (``None``: no cap), whether
    it is an admin, its spend target per request (``None``: none)."""

    name: str
    digest: bytes
    cap: float | None = None
    admin: bool = False
    budget: float | None = None


def digest(secret: str) -> bytes:
    """The sha256 of a key's secret (UTF-8)."""
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()


def load_keys(path: str | Path) -> list[Key]:
    """The keys of a keys file; :class:`KeysError` for a missing file or a bad entry."""
    path = Path(path)
    if not path.is_file():
        raise KeysError(f"--keys {path}: no such file")
    try:
        data = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise KeysError(f"{path}: not valid YAML ({type(exc).__name__})") from None
    unknown = (
        sorted(str(field) for field in data if field != "keys") if isinstance(data, dict) else []
    )
    if unknown:
        raise KeysError(
            f"{path}: unknown top-level field {unknown[0]!r}; the file holds only 'keys'"
        )
    if not isinstance(data, dict) or not isinstance(data.get("keys"), dict):
        raise KeysError(f"{path}: expected one top-level mapping 'keys' of name -> entry")
    keys, seen = [], set()
    for name, entry in data["keys"].items():
        where = f"{path}: keys.{name}"
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise KeysError(f"{where}: a key name is 1 to 64 letters, digits and . _ -")
        if not isinstance(entry, dict):
            raise KeysError(f"{where}: expected {{sha256: <64 hex digits>, cap: ..., admin: ...}}")
        unknown = sorted(str(field) for field in entry if field not in _FIELDS)
        if unknown:
            raise KeysError(
                f"{where}: unknown field {unknown[0]!r}; a key entry takes only "
                + ", ".join(_FIELDS)
            )
        hexdigest = entry.get("sha256")
        if not isinstance(hexdigest, str) or not _HEX.fullmatch(hexdigest):
            raise KeysError(f"{where}.sha256: expected 64 lowercase hex digits (the key's sha256)")
        if hexdigest in seen:
            raise KeysError(f"{where}.sha256: the same key as another entry")
        seen.add(hexdigest)
        cap = entry.get("cap")
        if cap is not None and (
            isinstance(cap, bool)
            or not isinstance(cap, (int, float))
            or not math.isfinite(cap)
            or cap < 0
        ):
            raise KeysError(f"{where}.cap: expected a number >= 0, got {cap!r}")
        budget = entry.get("budget")
        if budget is not None and (
            isinstance(budget, bool)
            or not isinstance(budget, (int, float))
            or not (0 < budget < math.inf)
        ):
            raise KeysError(f"{where}.budget: expected a mean cost per request > 0, got {budget!r}")
        admin = entry.get("admin", False)
        if not isinstance(admin, bool):
            raise KeysError(f"{where}.admin: expected true or false")
        keys.append(
            Key(
                name,
                bytes.fromhex(hexdigest),
                None if cap is None else float(cap),
                admin,
                None if budget is None else float(budget),
            )
        )
    if not keys:
        raise KeysError(f"{path}: no keys")
    return keys


class Keys:
    """Who may call the gateway and what each key has spent.

    Args:
        keys: the accepted keys (``[]``: no key needed; the spend is counted under
            ``None``).
        spend: ``{key name: cost}`` spent before (read from the decision logs).
    """

    def __init__(self, keys: list[Key], spend: dict[str, float] | None = None) -> None:
        self.keys = list(keys)
        self.spend: dict[str, float] = {k.name: 0.0 for k in self.keys}
        for name, cost in (spend or {}).items():
            self.spend[name] = self.spend.get(name, 0.0) + float(cost)
        self.running: dict[str | None, float] = {}
        self._lock = threading.Lock()

    @property
    def required(self) -> bool:
        """Whether a request must carry a key."""
        return bool(self.keys)

    def identify(self, header: str | None) -> Key | None:
        """The key an ``Authorization: Bearer <key>`` header carries (``None``: none)."""
        if not header or not header.startswith("Bearer "):
            return None
        wanted, found = digest(header[len("Bearer ") :]), None
        for key in self.keys:  # compare with every key: the time does not say which
            if hmac.compare_digest(key.digest, wanted):
                found = key
        return found

    def reserve(self, key: Key | None, estimate: float) -> None:
        """Hold ``estimate`` (the most the call can cost) of ``key``'s cap until
        :meth:`settle`; :class:`BudgetError` when spend, holds and ``estimate`` pass the cap."""
        with self._lock:
            if key is not None and key.cap is not None:
                spent = self.spend.get(key.name, 0.0)
                held = self.running.get(key.name, 0.0)
                if spent + held + estimate > key.cap:
                    raise BudgetError(
                        f"key {key.name!r} has spent {spent:.6g} of its cap {key.cap:g}"
                        + (f" ({held:.6g} held by calls running)" if held else "")
                        + f"; this request holds up to {estimate:.6g} (its prompt and "
                        "max_tokens at the dearest prices)"
                    )
            name = None if key is None else key.name
            self.running[name] = self.running.get(name, 0.0) + estimate

    def add_spent(self, spend: dict[str, float]) -> None:
        """Count spend logged before (``{key name: cost}``)."""
        with self._lock:
            for name, cost in spend.items():
                self.spend[name] = self.spend.get(name, 0.0) + float(cost)

    def settle(self, key: Key | None, estimate: float) -> None:
        """Release a reservation (the call's cost is added by :meth:`add`)."""
        name = None if key is None else key.name
        with self._lock:
            self.running[name] = max(0.0, self.running.get(name, 0.0) - estimate)

    def add(self, key: Key | None, cost: float) -> None:
        """Count ``cost`` against ``key``."""
        if key is None:
            return
        with self._lock:
            self.spend[key.name] = self.spend.get(key.name, 0.0) + cost

    def usage(self, key: Key | None) -> list[dict[str, Any]]:
        """``[{key, spend, cap, remaining}]``: the caller's key, or every key for an admin."""
        with self._lock:
            shown = self.keys if key is None or key.admin else [key]
            return [
                {
                    "key": k.name,
                    "spend": self.spend.get(k.name, 0.0),
                    "cap": k.cap,
                    "remaining": None
                    if k.cap is None
                    else max(0.0, k.cap - self.spend.get(k.name, 0.0)),
                }
                for k in shown
            ]
