"""Deprecated alias of :mod:`study.planner` (moved there; this alias is removed in the next release)."""

import importlib
import sys
import warnings

warnings.warn("launch.planner moved to study.planner; import it from there", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = importlib.import_module("study.planner")
