"""What a job imports to work with the platform: `from mlyard.sdk import checkpoint, models, report`.

It runs inside the user's training processes, so importing it must stay cheap: no server
code, and heavy libraries (torch) only when a call needs them.
"""

from mlyard.sdk import checkpoint, models
from mlyard.sdk.metrics import flush, report

__all__ = ["checkpoint", "flush", "models", "report"]
