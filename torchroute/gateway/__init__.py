"""An OpenAI-compatible gateway in front of a learned router (``torchroute gateway``).

:class:`~torchroute.gateway.app.Gateway` routes chat completions over the backends of a
backends file (:func:`~torchroute.gateway.backends.load_backends`) with the
:class:`~torchroute.serve.router.Router` of ``torchroute serve``, its decision log, limits
and Host check. Import ``torchroute.gateway.app`` for the HTTP application.
"""

from torchroute.gateway.backends import Backend, BackendsError, load_backends

__all__ = ["Backend", "BackendsError", "load_backends"]
