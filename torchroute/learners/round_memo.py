"""A function of a round's context that ``act`` computes and ``update`` reads again.

The loop hands ``update`` the very :class:`~torchroute.types.Context` object that ``act``
saw (unless the feedback comes late), and a learner built on a fitted router needs the
same function of it in both: the router's predictions (the residual learners) or the
representation its heads read (the neural-linear learners). :class:`RoundMemo` keeps the
last value with the context it was computed from and returns it while that context comes
back unchanged; any other context is computed afresh. The value is what the computation
gives, so a run's numbers are the same with or without it: only the second forward pass
of the round is saved.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from torchroute.types import Context

T = TypeVar("T")


class RoundMemo(Generic[T]):
    """The last ``compute()`` of :meth:`get` and the context it was computed from.

    A stored value is returned when the context is the same object (held here, so its id
    cannot be taken by another one), its features ``x [R, B, d]`` have not been changed in
    place since (their version counter, read on the host: no device sync) and the caller's
    ``stamp`` is equal (what else the value depends on, e.g. a buffer's version or device).
    """

    __slots__ = ("_context", "_stamp", "_value", "_version")

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        """Forget the stored value."""
        self._context: Context | None = None
        self._version = -1
        self._stamp: Hashable = None
        self._value: T | None = None

    def get(self, context: Context, compute: Callable[[], T], stamp: Hashable = None) -> T:
        """``compute()`` for ``context``, or the value stored for it (see the class doc).

        Args:
            context: the round's context (``x [R, B, d]``).
            compute: the function of ``context`` to keep (called when nothing fits).
            stamp: anything else the value depends on, compared with ``==``.

        Returns:
            The stored or the new value.
        """
        version = context.x._version
        if self._context is context and self._version == version and self._stamp == stamp:
            return self._value  # type: ignore[return-value]
        value = compute()
        self._context, self._version, self._stamp, self._value = context, version, stamp, value
        return value


__all__ = ["RoundMemo"]
