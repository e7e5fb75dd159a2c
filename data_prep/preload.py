"""Imported once by the worker fork server, so every worker starts with it all loaded.

The stage modules, the language-ID models, and what pyarrow imports lazily on first use
(``pa.array`` pulls in pandas when it is installed: ~1 s per process otherwise).
"""

import pyarrow as pa
import pyarrow.compute  # noqa: F401  (Array.take)

from data_prep import clean, writer  # noqa: F401
from data_prep.filters import preload_models
from data_prep.normalize import _composition_seconds

pa.array(["warm up"], type=pa.large_string()).to_pylist()
preload_models()
_composition_seconds()  # the table normalize_encoded's shortcut reads (~35 ms)
