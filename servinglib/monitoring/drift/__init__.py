"""Drift monitoring: reference profiles, live distributions, drift scores, data quality."""

from servinglib.monitoring.drift.monitor import DRIFT_GAUGES, DriftMonitor
from servinglib.monitoring.drift.profile import (
    DEFAULT_WINDOW,
    FieldProfile,
    Profile,
    ProfileError,
    WindowSpec,
    build_profile,
)
from servinglib.monitoring.drift.statistics import js_distance, psi
from servinglib.monitoring.drift.version import DRIFT_THRESHOLD, QUALITY_ISSUES, VersionMonitor

__all__ = [
    "DEFAULT_WINDOW",
    "DRIFT_GAUGES",
    "DRIFT_THRESHOLD",
    "QUALITY_ISSUES",
    "DriftMonitor",
    "FieldProfile",
    "Profile",
    "ProfileError",
    "VersionMonitor",
    "WindowSpec",
    "build_profile",
    "js_distance",
    "psi",
]
