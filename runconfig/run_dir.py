"""Deprecated alias of :mod:`rundir.files` (moved there; this alias is removed in the next release)."""

import importlib
import sys
import warnings

warnings.warn("runconfig.run_dir moved to rundir.files; import it from there", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = importlib.import_module("rundir.files")
