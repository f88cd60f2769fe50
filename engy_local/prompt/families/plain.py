"""Family "none": templates with no tool-call syntax. Text and reasoning
only; tool calls for these models come through the generic family."""

from __future__ import annotations

from ..parsing.toolparse import PlainParser
from .base import Family

FAMILY = Family(name="none", markers=(), parser=PlainParser)
