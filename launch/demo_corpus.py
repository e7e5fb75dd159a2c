"""Deprecated alias of :mod:`study.corpus` (moved there; this alias is removed in the next release)."""

import importlib
import sys
import warnings

warnings.warn("launch.demo_corpus moved to study.corpus; import it from there", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = importlib.import_module("study.corpus")
