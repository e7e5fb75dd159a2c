"""Job scripts and the files they write, on the ground floor: standard library only.

Atomic writes (:mod:`jobscripts.atomic`), shell quoting (:mod:`jobscripts.shell`), bash and
``#SBATCH`` script rendering (:mod:`jobscripts.scripts`) and ``sbatch`` submission
(:mod:`jobscripts.sbatch`). Shared by ``launch`` and ``data_prep``, and imported by
data_prep's worker processes, so nothing here may import a third-party package or another
package of the toolkit (tests/test_import_layers.py).
"""
