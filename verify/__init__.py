"""The verification harness: run conv3d_bwd on a backend, judge it against the float64 oracle.

Stable API (the pytest suites build on it):

- ``verify.cases``: ``Case`` (frozen, readable ``.id``), ``CASE_SETS`` ("fast", "default",
  "full"), ``GROUPS``, ``GRAD_SUBSETS``, ``case_from_args``;
- ``verify.inputs``: ``make_inputs(case, mode, seed) -> (dy, x, w)`` and ``make_input_set`` (with
  provenance), modes "exact" and "stat";
- ``verify.backends``: ``run_kernel(case, dy, x, w, backend, target, dry) -> KernelRun``,
  ``resolve_backend``, ``BackendUnavailable``, ``register_backend`` (tests only);
- ``verify.harness``: ``run_case(case, backend, mode, seed, target) -> CaseResult`` with
  ``GradResult`` per gradient and ``CaseResult.to_records()``;
- ``verify.check``: ``check_against_oracle(outputs, dy, x_in, filters, ...) -> OracleCheck`` (one
  call: oracle, bound and verdict per gradient) and ``oracle_reference``;
- ``verify.layouts``: filters and padding to and from PyTorch's conventions;
- ``verify.report``: ``write_reports(records, meta, out_dir)``, ``merge_reports``;
- ``verify.gate``: ``gate_report(path) -> GateVerdict`` and ``python -m conv3d_bwd.verify.gate DIR`` (CI gate);
- ``verify.cli``: the ``conv3d-bwd`` command line (``main(argv) -> exit code``).

The tolerance model itself lives in ``reference.tolerance``.
"""
