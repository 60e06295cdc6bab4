"""``python -m conv3d_bwd.nkisim.conformance``: run the known kernels of local checkouts; print a table (or JSON)."""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from .runner import Outcome, run_spec
from .spec import KernelSpec


def catalog() -> dict[str, tuple[KernelSpec, ...]]:
    from . import library, samples

    return {"nki-samples": samples.SPECS, "nki-library": library.SPECS}


def discover_unspecified(root: Path, specs: Sequence[KernelSpec]) -> list[Outcome]:
    """nki-library kernels with a ``*_torch.py`` reference that no spec covers: listed as not run."""
    covered = {s.name.split(" ")[1] for s in specs}   # "core/cumsum/cumsum", "core/router_topk", ...
    rows = []
    for ref in sorted((root / "src").rglob("*_torch.py")):
        kernel = ref.with_name(ref.name.replace("_torch.py", ".py"))
        if not kernel.is_file():
            continue
        rel = kernel.relative_to(root / "src" / "nkilib_src" / "nkilib")
        if str(rel.with_suffix("")) in covered or str(rel.parent) in covered:
            continue
        rows.append(Outcome(f"nki-library {rel}", False,
                            False, "", "no spec (entry, small shapes, tolerance) in nkisim.conformance", extra=True))
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conv3d_bwd.nkisim.conformance", description=__doc__)
    parser.add_argument("--nki-library", type=Path, help="a local checkout of aws-neuron/nki-library")
    parser.add_argument("--nki-samples", type=Path, help="a local checkout of aws-neuron/nki-samples")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("-k", dest="match", default="", help="only kernels whose name contains this")
    parser.add_argument("--no-extra", action="store_true", help="only the target kernels, not further versions")
    args = parser.parse_args(argv)
    roots = {"nki-library": args.nki_library, "nki-samples": args.nki_samples}
    if not any(roots.values()):
        parser.error("give at least one of --nki-library PATH, --nki-samples PATH")
    for name, root in roots.items():
        if root is not None and not root.is_dir():
            parser.error(f"argument --{name}: {root} is not a directory")
    os.environ.setdefault("NKISIM", "1")
    rows: list[Outcome] = []
    for repo, specs in catalog().items():
        root = roots[repo]
        if root is None:
            continue
        for spec in specs:
            if args.match and args.match not in spec.name or args.no_extra and spec.extra:
                continue
            rows.append(run_spec(spec, root.resolve()))
        if repo == "nki-library" and not args.match and not args.no_extra:
            rows.extend(discover_unspecified(root.resolve(), specs))
    if args.json:
        print(json.dumps([r.as_dict() for r in rows], indent=1))
    else:
        print(format_table(rows))
    return 0


def format_table(rows: Sequence[Outcome]) -> str:
    def mark(flag: bool) -> str:
        return "yes" if flag else "no"

    lines = ["| kernel | ran | matched | max abs err | first error / skipped |", "|---|---|---|---|---|"]
    for r in rows:
        err = f"skipped: {r.skipped}" if r.skipped else r.first_error
        mae = "" if r.max_abs_err is None else f"{r.max_abs_err:.3g}"
        lines.append(f"| {r.kernel}{' (extra)' if r.extra else ''} | {mark(r.ran)} | {mark(r.matched)} | {mae} | "
                     f"{err.replace('|', '/')} |")
    targets = [r for r in rows if not r.extra]
    further = [r for r in rows if r.extra]
    lines.append("")
    lines.append(f"target kernels: {_counts(targets)}; further rows: {_counts(further)}")
    return "\n".join(lines)


def _counts(rows: list) -> str:
    return (f"{sum(r.matched for r in rows)} of {len(rows)} matched, "
            f"{sum(bool(r.skipped) for r in rows)} skipped")


if __name__ == "__main__":
    sys.exit(main())
