"""Deprecated alias of :mod:`jobscripts.scripts` (moved there; this alias is removed in the next release)."""

import importlib
import sys
import warnings

warnings.warn("runconfig.scripts moved to jobscripts.scripts; import it from there", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = importlib.import_module("jobscripts.scripts")
