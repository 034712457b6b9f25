"""Progressive delivery: a candidate version promoted or rolled back on measured evidence.

:mod:`~servinglib.delivery.statistics` holds the tests, :mod:`~servinglib.delivery.gates`
the verdicts (:mod:`~servinglib.delivery.custom_gates` those on drift, the model's own
metrics and Prometheus queries, read by :mod:`~servinglib.delivery.external`),
:mod:`~servinglib.delivery.evidence` reads the per-version counters,
:mod:`~servinglib.delivery.controller` acts through the admin API and
:mod:`~servinglib.delivery.report` writes the readout.
"""
