"""Small helpers for the nkisim tests: run a body inside a kernel, match rule messages."""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

import nkisim


def inside(body: Callable[[], Any], target: str = "trn2", trace_only: bool = False) -> Any:
    """Run ``body`` as a kernel with no arguments and return what it returned (any Python value)."""
    box: dict[str, Any] = {}

    def kernel():
        box["value"] = body()

    nkisim.run(kernel, target=target, trace_only=trace_only)
    return box["value"]


def raises_rule(instruction: str, operand: str, rule: str):
    """pytest.raises for an NkiValidationError naming the instruction, the operand and the rule."""
    return pytest.raises(nkisim.NkiValidationError,
                         match=re.escape(f"{instruction}: operand '{operand}': ") + ".*" + rule)
