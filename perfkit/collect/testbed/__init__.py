"""The testbed: many emulated nodes on one machine (network and UTS namespaces, shaped links)."""

from perfkit.collect.testbed.cluster import Testbed
from perfkit.collect.testbed.netns import why_unavailable
from perfkit.collect.testbed.spec import TestbedSpec, parse_rate, parse_time

__all__ = ["Testbed", "TestbedSpec", "parse_rate", "parse_time", "why_unavailable"]
