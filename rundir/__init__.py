"""The run directory and the run contract of docs/contracts.md, in one place.

:mod:`rundir.contract` names every file, exit code (:class:`~rundir.contract.ExitCode`) and
status (:class:`~rundir.contract.Status`) that the trainer, launch, data_prep and eval agree
on; :mod:`rundir.files` reads and writes the run directory's files; :mod:`rundir.lock` is the
run lock; :mod:`rundir.attempts` is the attempt log that retry accounting reads. Light on
purpose (standard library, ``jobscripts``, and ``patches.parametrization`` for the base
depth): a login node reads run directories without importing torch.
"""
