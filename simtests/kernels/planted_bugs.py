"""The planted-bug experiment: does the suite catch each kind of kernel bug?

Each bug is one textual edit of the kernel source, applied alone to a scratch copy of the committed
tree (``git archive HEAD``; the working tree is never touched); the suite then runs on the copy and
the failing test ids are written to ``<workdir>/<bug>/failed.json``. Not a test (it takes minutes
per bug): run it by hand after a kernel change that moves the edited lines.

    python -m simtests.kernels.planted_bugs [--workdir /tmp/plant] [--pytest-args "simtests -n 2"] [BUG ...]

When a kernel edit no longer applies (the line moved), the script says so; update the edit here.
"""
from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class PlantedBug:
    """Replace ``old`` by ``new`` in ``path`` (``old`` must occur exactly ``count`` times)."""

    path: str
    old: str
    new: str
    what: str
    count: int = 1


BUGS: dict[str, PlantedBug] = {
    "tap_offset_off_by_one": PlantedBug(
        "kernels/nki_dx.py",
        "qh = jh - ax[1].tap_shift(kh, pw.phases[1]) - bh.q0",
        "qh = jh - ax[1].tap_shift(kh, pw.phases[1]) - bh.q0 + 1",
        "dx reads the dy row one below the H tap's window"),
    "dw_tap_offset_off_by_one": PlantedBug(
        "kernels/nki_dw.py",
        "band_slices(kh * ax[1].r + sh * ax[1].s, th, ax[1].s)",
        "band_slices(kh * ax[1].r + sh * ax[1].s + (kh == 0), th, ax[1].s)",
        "dw's first H tap reads the x row one below its window (stays inside the buffer)"),
    "padding_sides_swapped": PlantedBug(
        "kernels/geometry.py",
        "Axis(x[2 + a], w[a], st[a], dil[a], pad[2 * a], pad[2 * a + 1])",
        "Axis(x[2 + a], w[a], st[a], dil[a], pad[2 * a + 1], pad[2 * a])",
        "the kernel's geometry takes (hi, lo) for (lo, hi) on every axis"),
    "missing_stride_dw_depth": PlantedBug(
        "kernels/nki_dw.py",
        "band_slices(kd * ax[0].r + sd * ax[0].s, td, ax[0].s)",
        "band_slices(kd * ax[0].r + sd * ax[0].s, td, 1)",
        "dw's x window steps by 1 instead of the D stride"),
    "dropped_cout_tile_dx": PlantedBug(
        "kernels/nki_dx.py",
        "for c in range(len(co_tiles))]",
        "for c in range(max(1, len(co_tiles) - 1))]",
        "dx's accumulation skips the last C_out tile of 128"),
    "bf16_partial_sum_dw": PlantedBug(
        "kernels/nki_dw.py",
        "ctx.dtype if direct else nl.float32",
        "ctx.dtype",
        "dw's accumulator over boxes and batches is kept in the input dtype (bf16), not fp32"),
}


def committed_tree(dest: Path) -> None:
    """Extract ``git archive HEAD`` of the repository into ``dest``."""
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, check=True, capture_output=True).stdout
    with tempfile.TemporaryFile() as handle:
        handle.write(archive)
        handle.seek(0)
        with tarfile.open(fileobj=handle) as tar:
            tar.extractall(dest, filter="data")


def plant(tree: Path, bug: PlantedBug) -> None:
    path = tree / bug.path
    source = path.read_text(encoding="utf-8")
    found = source.count(bug.old)
    if found != bug.count:
        raise SystemExit(f"{bug.path}: expected {bug.count} occurrence(s) of {bug.old!r}, found {found}; "
                         "the kernel changed: update BUGS in simtests/kernels/planted_bugs.py")
    path.write_text(source.replace(bug.old, bug.new), encoding="utf-8")


def run_suite(tree: Path, pytest_args: list[str]) -> dict:
    log = tree / "pytest.log"
    with log.open("w", encoding="utf-8") as handle:
        proc = subprocess.run([sys.executable, "-m", "pytest", *pytest_args, "-p", "no:cacheprovider", "-q",
                               "-rf", "--tb=line"], cwd=tree, stdout=handle, stderr=subprocess.STDOUT,
                              check=False)
    text = log.read_text(encoding="utf-8")
    lines = text.strip().splitlines()
    return {"returncode": proc.returncode, "summary": lines[-1] if lines else "",
            "failed": sorted(set(re.findall(r"^FAILED (\S+)", text, re.MULTILINE)))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bugs", nargs="*", help=f"baseline and/or {', '.join(BUGS)} (default: all)")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "plant")
    parser.add_argument("--pytest-args", default="simtests -n 2")
    args = parser.parse_args(argv)
    names = args.bugs or ["baseline", *BUGS]
    unknown = [n for n in names if n != "baseline" and n not in BUGS]
    if unknown:
        parser.error(f"unknown bug(s) {unknown}; choose from baseline, {', '.join(BUGS)}")
    base = args.workdir / "base"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    committed_tree(base)
    for name in names:
        tree = args.workdir / name
        shutil.rmtree(tree, ignore_errors=True)
        shutil.copytree(base, tree)
        if name != "baseline":
            plant(tree, BUGS[name])
        result = run_suite(tree, shlex.split(args.pytest_args))
        (tree / "failed.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
        print(f"{name}: {len(result['failed'])} failed ({result['summary']})", flush=True)
        for test_id in result["failed"]:
            print(f"    {test_id}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
