"""Deprecated alias: the study moved to the :mod:`study` package (this alias is removed in the next release).

``launch.demo.main``/``add_arguments`` are :mod:`study.cli`'s, ``run_demo`` :mod:`study.demo`'s,
``AdaptiveSweep`` :mod:`study.sweep`'s; ``python -m launch demo`` itself is unchanged.
"""

import warnings

from study.cli import add_arguments, main  # noqa: F401
from study.demo import run_demo  # noqa: F401
from study.sweep import AdaptiveSweep, variant_values  # noqa: F401

warnings.warn(
    "launch.demo moved to the study package (study.cli, study.demo, study.sweep)", DeprecationWarning, stacklevel=2
)
