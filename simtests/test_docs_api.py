"""The examples of docs/api.md run: every fenced ``python`` block, in order, in one namespace.

They run in a fresh interpreter (as a reader would run them: the repository on the path, the
emulator bound under the name ``nki``, NEURON_PLATFORM_TARGET_OVERRIDE unset) in a temporary working
directory, so files the examples write stay out of the repository.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
API_DOC = ROOT / "docs" / "api.md"
_PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)

# Executes the blocks with the doc's own line numbers, so a traceback points into the .md file.
_RUNNER = """
import json, sys, traceback
doc, blocks = sys.argv[1], json.load(open(sys.argv[2], encoding="utf-8"))
namespace = {"__name__": "__docs__"}
for line, code in blocks:
    try:
        exec(compile("\\n" * (line - 1) + code, doc, "exec"), namespace)
    except BaseException:
        traceback.print_exc()
        print(f"DOC BLOCK FAILED: the python block at {doc} line {line}", file=sys.stderr)
        sys.exit(1)
    print(f"DOC BLOCK OK: line {line}", flush=True)
"""


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(first code line, code) of every fenced python block, in order."""
    return [(text.count("\n", 0, m.start(1)) + 1, m.group(1)) for m in _PYTHON_BLOCK.finditer(text)]


def run_blocks(doc: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    blocks = python_blocks(doc.read_text(encoding="utf-8"))
    blocks_file = tmp_path / "blocks.json"
    blocks_file.write_text(json.dumps(blocks), encoding="utf-8")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PYTEST_") and k not in ("NEURON_PLATFORM_TARGET_OVERRIDE", "CONV3D_BWD_BACKEND")}
    env.update(PYTHONPATH=str(ROOT), NKISIM="1", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               MKL_NUM_THREADS="1")
    work = tmp_path / "work"
    work.mkdir()
    return subprocess.run([sys.executable, "-c", _RUNNER, str(doc), str(blocks_file)], cwd=work, env=env,
                          capture_output=True, text=True, timeout=900, check=False)


@pytest.mark.fast
def test_api_doc_holds_the_worked_examples():
    code = "\n".join(c for _, c in python_blocks(API_DOC.read_text(encoding="utf-8")))
    for call in ("nkisim.run(conv3d_bwd", "nki.simulate(conv3d_bwd)", "check_against_oracle(",
                 "filters_from_torch(", "padding_from_torch_pad(", "gate_report(", "report.json"):
        assert call in code, f"docs/api.md: no python example uses {call}"


@pytest.mark.fast
def test_block_extraction_keeps_doc_line_numbers():
    text = "# t\n\n```python\na = 1\n```\n\n```sh\nnot python\n```\n```python\nb = a + 1\nc = 2\n```\n"
    assert python_blocks(text) == [(4, "a = 1\n"), (11, "b = a + 1\nc = 2\n")]


def test_a_failing_block_fails_the_run_and_names_its_line(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("```python\nvalue = 41\n```\n\ntext\n\n```python\nassert value == 42, 'off by one'\n```\n",
                   encoding="utf-8")
    proc = run_blocks(doc, tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "DOC BLOCK OK: line 2" in proc.stdout
    assert f"DOC BLOCK FAILED: the python block at {doc} line 8" in proc.stderr
    assert f'File "{doc}", line 8' in proc.stderr and "off by one" in proc.stderr


def test_api_doc_examples_run(tmp_path):
    blocks = python_blocks(API_DOC.read_text(encoding="utf-8"))
    proc = run_blocks(API_DOC, tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert proc.stdout.count("DOC BLOCK OK") == len(blocks) >= 3, out
