"""torchroute: online model routing with contextual bandits, batched over trials."""

from torchroute.types import Context, Decision, Feedback, Outcome

__version__ = "0.1.0"

__all__ = ["Context", "Decision", "Feedback", "Outcome", "__version__"]
