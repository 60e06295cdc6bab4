"""Errors raised by the emulator."""
from __future__ import annotations


class NkiValidationError(AssertionError):
    """A kernel broke a hardware or API rule; the message names instruction, operand and rule."""


class NkiStrictWarning(UserWarning):
    """A rule nkisim enforces more strictly than the real simulator, downgraded by NKISIM_STRICT=0."""


class NkiUsageError(ValueError):
    """Bad input to the emulator itself (an argument, a value, the rule it breaks)."""


def violation(instruction: str, operand: str, rule: str) -> NkiValidationError:
    """Build the one message format every rule uses: ``instr: operand 'x': rule``."""
    return NkiValidationError(f"{instruction}: operand '{operand}': {rule}")
