"""Deprecated alias of :mod:`rundir.contract` (moved there; this alias is removed in the next release)."""

import importlib
import sys
import warnings

warnings.warn("launch.contract moved to rundir.contract; import it from there", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = importlib.import_module("rundir.contract")
