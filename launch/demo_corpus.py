"""Deprecated alias of :mod:`data_prep.registry_corpora` (the KJV corpus is its ``kjv`` row; this
alias is removed in the next release)."""

import importlib
import sys
import warnings

warnings.warn(
    "launch.demo_corpus moved to data_prep.registry_corpora (the 'kjv' row); import it from there",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = importlib.import_module("data_prep.registry_corpora")
