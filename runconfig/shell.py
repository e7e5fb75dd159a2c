"""Deprecated alias of :mod:`jobscripts.shell` (moved there; this alias is removed in the next release)."""

import importlib
import sys
import warnings

warnings.warn("runconfig.shell moved to jobscripts.shell; import it from there", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = importlib.import_module("jobscripts.shell")
