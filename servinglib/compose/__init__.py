"""Composed models: pipelines of steps and ensembles of members, served like any model.

A composed model is an entry of ``models:`` with ``pipeline:`` or ``ensemble:`` instead of
``class:``/``runtime:``. Each of its versions calls other configured models through their
own lanes (batcher, instances, deadline, admission) and shares the request's deadline.

- :mod:`servinglib.compose.spec`: the parsed keys (steps, members, combiner, policy).
- :mod:`servinglib.compose.checks`: what ``servinglib validate`` refuses (cycles, unknown
  models, version pins that do not exist, names that do not match).
- :mod:`servinglib.compose.combiners`: ``mean``, ``weighted_mean``, ``vote``, ``max``.
- :mod:`servinglib.compose.order`: the load order of models and the waves of a version's
  steps (independent steps run at once).
- :mod:`servinglib.compose.model`: :class:`~servinglib.compose.model.ComposedModel`, the
  Model the registry loads for each composed version.
- :mod:`servinglib.compose.calls`: calls a member through the service's lane.

This package imports nothing at the top so the config layer can use its ``spec``.
"""
