"""Analyses of the canonical Dataset; ``pop_metrics`` is re-exported here and in ``perfkit``."""

from perfkit.analysis.pop import pop_metrics

__all__ = ["pop_metrics"]
