"""docs/ci-workflow.md: every conv3d-bwd and verify.gate command of its workflow parses with the real
argument parsers, with the values the workflow means (a renamed or removed flag fails here)."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from conv3d_bwd.verify.cli import UsageError
from conv3d_bwd.verify.cli import build_parser as cli_parser
from conv3d_bwd.verify.gate import build_parser as gate_parser

DOC = Path(__file__).resolve().parents[1] / "docs" / "ci-workflow.md"
_YAML_BLOCK = re.compile(r"^```yaml\n(.*?)^```", re.MULTILINE | re.DOTALL)
# The workflow's expressions, as one matrix job would see them.
_EXPRESSIONS = {"${{ matrix.shard }}": "3", "${{ env.SHARDS }}": "4"}


def _commands(prefix: str) -> list[list[str]]:
    """The argument lists of the workflow's `run:` lines that start with ``prefix``."""
    (yaml,) = _YAML_BLOCK.findall(DOC.read_text(encoding="utf-8"))
    found = []
    for line in yaml.splitlines():
        match = re.match(r"\s*(?:-\s*)?run:\s*(.*)$", line)
        command = match.group(1) if match else ""
        if command.startswith(prefix):
            for expression, value in _EXPRESSIONS.items():
                command = command.replace(expression, value)
            found.append(shlex.split(command)[len(shlex.split(prefix)):])
    return found


@pytest.mark.fast
def test_the_shard_and_merge_commands_parse():
    commands = _commands("conv3d-bwd ")
    assert len(commands) == 2, commands
    shard, merge = (cli_parser().parse_args(args) for args in commands)
    assert (shard.command, shard.case_set, shard.shard, shard.out) == ("report", "full", (3, 4), "r3")
    assert (merge.command, merge.merge, merge.out) == ("report", ["shards/report-shard-*"], "full")


@pytest.mark.fast
def test_the_gate_command_parses():
    (args,) = _commands("python -m conv3d_bwd.verify.gate")
    parsed = gate_parser().parse_args(args)
    assert parsed.report == "full" and parsed.fail_on_mistrusted is False


@pytest.mark.fast
def test_a_renamed_flag_would_fail():
    with pytest.raises(UsageError, match="unrecognized arguments: --sharding"):
        cli_parser().parse_args(["report", "--sharding", "1/4"])
