"""``python -m eval lm-eval TARGET... --tasks T[,T...]``: downstream scores through lm-evaluation-harness.

TARGET is a run directory (exported first with ``training.export_hf`` into ``RUN_DIR/hf``,
reused while it holds the latest checkpoint in the current export format) or an export
folder. The model goes to lm-eval's ``hf`` backend exactly as any Hugging Face checkpoint
would; an export whose parity
check failed is refused. Results go to ``lm_eval.json`` next to ``config.yaml`` (run) or
``export.json`` (folder): per task, each metric and its standard error, with the lm-eval
version, the task settings and the checkpoint. ``eval transfer`` reads them from a sweep's
runs (``--downstream TASK/METRIC``).

Local tasks: ``pydoc_continuation`` (shipped in eval/lm_eval_tasks, no download; a smoke
test, not a benchmark) and any folder given with ``--include-path``. On a cluster the
standard tasks run the same way (``--tasks hellaswag,arc_easy``, docs/eval.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

from jobscripts.atomic import atomic_write_text
from rundir.contract import ExitCode
from rundir.files import (
    CONFIG_FILE,
    HF_EXPORT_DIR,
    LM_EVAL_FILE,
    LM_EVAL_SAMPLES_FILE,
    RunDirError,
    latest_checkpoint,
    step_dir_name,
)
from training.export_hf import EXPORT_FILE, EXPORT_FORMAT_VERSION, NoTokenizerError, export, refuse_diverged

HELP = "score run directories or exported models on lm-evaluation-harness tasks (hf backend)"
TASKS_DIR = Path(__file__).with_name("lm_eval_tasks")
LOCAL_TASKS: dict[str, str] = {"pydoc_continuation": "pydoc_continuation.jsonl"}

_LOCAL_TASK_YAML = """\
task: {task}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{context}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: label
target_delimiter: ""
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
  - metric: acc_norm
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("targets", nargs="+", help="run directories or export folders")
    parser.add_argument("--tasks", required=True, help="comma-separated lm-eval task names")
    parser.add_argument("--include-path", default=None, help="a folder of extra lm-eval task YAMLs")
    parser.add_argument("--num-fewshot", type=int, default=None)
    parser.add_argument("--limit", type=float, default=None, help="items per task (lm-eval's --limit)")
    parser.add_argument("--batch-size", default="1")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:0, ...")
    parser.add_argument("--dtype", default="float32", help="the exported weights are float32")
    parser.add_argument("--step", type=int, default=None, help="for run directories: the checkpoint to export")
    parser.add_argument(
        "--log-samples",
        action="store_true",
        help=f"also write each request and its log-likelihood ({LM_EVAL_SAMPLES_FILE})",
    )


def write_local_tasks(folder: Path) -> None:
    """The shipped tasks as lm-eval YAMLs pointing at their data by absolute path."""
    for task, data in LOCAL_TASKS.items():
        text = _LOCAL_TASK_YAML.format(task=task, data=json.dumps(str(TASKS_DIR / data)))
        (folder / f"{task}.yaml").write_text(text)


def model_folder(target: Path, step: Optional[int]) -> tuple[Path, Path]:
    """(exported model folder, where lm_eval.json goes) for a run directory or export folder."""
    if (target / EXPORT_FILE).is_file():
        return target, target
    if not (target / CONFIG_FILE).is_file():
        raise RunDirError(f"{target}: neither a run directory ({CONFIG_FILE}) nor an export folder ({EXPORT_FILE})")
    refuse_diverged(target, step)  # before an earlier export of its latest checkpoint is reused
    folder = target / HF_EXPORT_DIR
    record = json.loads((folder / EXPORT_FILE).read_text()) if (folder / EXPORT_FILE).is_file() else None
    wanted = step_dir_name(step) if step is not None else getattr(latest_checkpoint(target), "name", None)
    current = record is not None and record.get("format_version") == EXPORT_FORMAT_VERSION
    if not current or record.get("checkpoint") != wanted:
        export(target, folder, step)
    return folder, target


def _sample_rows(samples: dict[str, list[dict]]) -> list[dict[str, Any]]:
    """lm-eval's logged samples as flat rows: task, item, choice, context, continuation, loglik."""
    rows = []
    for task, items in samples.items():
        for item in items:
            for choice, (request, response) in enumerate(zip(item["arguments"], item["resps"])):
                context, continuation = request[0], request[1]
                rows.append(
                    {
                        "task": task,
                        "item": item["doc_id"],
                        "choice": choice,
                        "target": item["target"],
                        "context": context,
                        "continuation": continuation,
                        "loglikelihood": float(response[0][0]),
                    }
                )
    return rows


def evaluate(folder: Path, args: argparse.Namespace) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """lm-eval's ``simple_evaluate`` on one exported folder: the record we keep, and the
    logged samples (empty unless ``--log-samples``)."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    record = json.loads((folder / EXPORT_FILE).read_text())
    if not record.get("passed"):
        raise RunDirError(f"{folder / EXPORT_FILE}: the export failed its parity check; not evaluating it")
    if not record.get("tokenizer"):
        raise RunDirError(
            f"{folder / EXPORT_FILE}: exported without a tokenizer (--weights-only, or a run on mock data); "
            "lm-eval needs the model's tokenizer: export a run trained on tokenized data"
        )
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    with tempfile.TemporaryDirectory() as local:
        write_local_tasks(Path(local))
        include = [local] + ([args.include_path] if args.include_path else [])
        manager = TaskManager(include_path=include)
        out = lm_eval.simple_evaluate(
            model="hf",
            model_args={"pretrained": str(folder), "dtype": args.dtype},
            tasks=tasks,
            num_fewshot=args.num_fewshot,
            limit=args.limit,
            batch_size=args.batch_size,
            device=args.device,
            task_manager=manager,
            log_samples=bool(getattr(args, "log_samples", False)),
        )
    scores = {
        task: {k.split(",")[0]: v for k, v in metrics.items() if k != "alias" and isinstance(v, (int, float))}
        for task, metrics in out["results"].items()
    }
    record = {
        "lm_eval_version": lm_eval.__version__,
        "export": str(folder),
        "checkpoint": record["checkpoint"],
        "step": record["step"],
        "tasks": scores,
        "higher_is_better": {
            task: {k: v for k, v in metrics.items() if isinstance(v, bool)}
            for task, metrics in (out.get("higher_is_better") or {}).items()
        },
        "settings": {"num_fewshot": args.num_fewshot, "limit": args.limit, "dtype": args.dtype},
        "n_samples": {t: v.get("effective", v.get("original")) for t, v in out.get("n-samples", {}).items()},
    }
    return record, _sample_rows(out.get("samples") or {})


def summary_line(tasks: dict[str, dict[str, Any]]) -> str:
    """Each task's own metrics (with their standard errors where lm-eval gives one), for the console."""

    def metric(name: str, values: dict[str, Any]) -> str:
        stderr = values.get(f"{name}_stderr")
        return f"{name} {values[name]:.4g}" + (f" ± {stderr:.4g}" if isinstance(stderr, (int, float)) else "")

    return "; ".join(
        f"{task} " + ", ".join(metric(k, m) for k in m if k != "sample_len" and not k.endswith("_stderr"))
        for task, m in tasks.items()
    )


def run(args: argparse.Namespace) -> ExitCode:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local folders only: never wait on the network
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    status = ExitCode.OK
    for target in map(Path, args.targets):
        try:
            folder, dest = model_folder(target, args.step)
            result, samples = evaluate(folder, args)
        except NoTokenizerError as exc:  # export's --weights-only is no way out here: lm-eval needs the tokenizer
            print(f"error: {exc.reason}; lm-eval scores text through the run's tokenizer", file=sys.stderr)
            status = ExitCode.USAGE
            continue
        except (RunDirError, ValueError, KeyError) as exc:
            message = str(exc)
            print(f"error: {message if message.startswith(str(target)) else f'{target}: {message}'}", file=sys.stderr)
            status = ExitCode.USAGE
            continue
        atomic_write_text(dest / LM_EVAL_FILE, json.dumps(result, indent=1))
        if samples:
            atomic_write_text(dest / LM_EVAL_SAMPLES_FILE, "".join(json.dumps(r) + "\n" for r in samples))
        print(f"{target}: {summary_line(result['tasks'])} -> {dest / LM_EVAL_FILE}")
    return status
