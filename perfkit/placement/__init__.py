"""Profile-guided rank placement: topology, Scotch adapter, strategies, cost model, launch files.

Start with ``perfkit.place(matrix, perfkit.Topology(nodes=..., cores=...))``; see
``docs/placement.md``.
"""
