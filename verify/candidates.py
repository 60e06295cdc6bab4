"""Run every feasible plan of one case on nkisim against the oracle (not only the planner's pick).

The pick alone hides a crash or a wrong number in an alternative the planner would choose on a
neighbouring geometry or target, so tests and the sweep force each feasible candidate in turn
(``kernels.plan.forced_plan``). The inputs and the oracle are computed once per case.
"""
from __future__ import annotations

from dataclasses import dataclass

from conv3d_bwd.reference.tolerance import compute_metrics
from conv3d_bwd.verify.cases import Case
from conv3d_bwd.verify.harness import reference_for
from conv3d_bwd.verify.inputs import make_input_set


@dataclass(frozen=True)
class CandidateOutcome:
    """One forced candidate: its label, the kernel's exception text (crash) or the gradients that
    failed the comparison (wrong); both empty when it passed."""

    label: str
    error: str = ""
    wrong: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return not self.error and not self.wrong

    def describe(self) -> str:
        if self.error:
            return f"{self.label}: crash: {self.error}"
        if self.wrong:
            return f"{self.label}: wrong {', '.join(self.wrong)}"
        return f"{self.label}: pass"


def case_plan(case: Case, target: str = "trn2"):
    """The planner's Plan for the case (raises Conv3dBwdPlanError when none fits)."""
    from conv3d_bwd.kernels.plan import plan_conv3d_bwd

    return plan_conv3d_bwd(case.dy_shape, case.x_shape, case.w_shape, stride=case.stride,
                           padding=case.padding, dilation=case.dilation, dtype=case.dtype, target=target,
                           lnc=case.lnc, compute_dx="dx" in case.grads, compute_dw="dw" in case.grads,
                           compute_db="db" in case.grads)


def run_candidates(case: Case, mode: str = "exact", seed: int = 0, target: str = "trn2",
                   plans=None) -> list[CandidateOutcome]:
    """Force each of ``plans`` (default: every feasible candidate of the case's plan) and compare every
    requested gradient with the oracle (exact mode: bit equality)."""
    from conv3d_bwd.kernels.plan import forced_plan
    from conv3d_bwd.verify.backends import run_kernel

    if plans is None:
        plans = case_plan(case, target).feasible_candidates()
    inputs = make_input_set(case, mode, seed)
    ref = reference_for(case, inputs)
    out = []
    for plan in plans:
        try:
            with forced_plan(plan):
                run = run_kernel(case, *inputs.as_tuple(), backend="nkisim", target=target)
        except Exception as exc:  # noqa: BLE001 - a crash is this candidate's outcome
            out.append(CandidateOutcome(plan.label, error=f"{type(exc).__name__}: {exc}"))
            continue
        wrong = tuple(name for name in case.grads
                      if not compute_metrics(run.outputs[name], ref.values[name], ref.magnitudes[name],
                                             ref.k_elem[name], dtype=case.dtype, mode=mode,
                                             reachable=ref.reachable[name]).passed)
        out.append(CandidateOutcome(plan.label, wrong=wrong))
    return out


__all__ = ["CandidateOutcome", "case_plan", "run_candidates"]
