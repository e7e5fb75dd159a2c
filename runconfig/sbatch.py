"""Deprecated alias of :mod:`jobscripts.sbatch` (moved there; this alias is removed in the next release)."""

import importlib
import sys
import warnings

warnings.warn("runconfig.sbatch moved to jobscripts.sbatch; import it from there", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = importlib.import_module("jobscripts.sbatch")
