"""A model version's life before it serves.

Importing its class, checking its artifacts, loading it under a timeout, self-testing it,
and the registry and rollout state that hold the result.
"""
