"""Deprecated alias of :mod:`study.spec` (moved there; this alias is removed in the next release)."""

import importlib
import sys
import warnings

warnings.warn("launch.study moved to study.spec; import it from there", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = importlib.import_module("study.spec")
