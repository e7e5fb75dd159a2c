"""Deprecated alias of :mod:`rundir.attempts` (moved there; this alias is removed in the next release)."""

import importlib
import sys
import warnings

warnings.warn("runconfig.attempts moved to rundir.attempts; import it from there", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = importlib.import_module("rundir.attempts")
