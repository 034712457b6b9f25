"""Offline drift: build a version's reference profile and report drift from logged answers.

These are tools beside ``batch/``: they load a version through the one assembly
(:func:`servinglib.serving.assembly.load_service`), so composed models profile like any other,
and they read the prediction log; the live monitor stays in ``monitoring.drift``.
"""
