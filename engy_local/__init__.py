"""engy: local inference for agent tools."""

__version__ = "0.1.0"
