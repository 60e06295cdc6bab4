"""What a plan means, shared by the NKI kernel and the planner (pure Python, no NKI import).

The plan record and its method enums (``record``), the forced plan (``forcing``), and the derived
schedule every option implies: which work items each LNC program runs (``items``, ``dx_options``,
``dw_options``), the x-stationary chunks of dw (``dw_xs``), the PSUM pools (``psum``) and how the
gradients are composed (``compose``). The planner's search and estimate live in ``kernels.plan``.
"""
