"""The conv3d backward NKI kernel and its planner.

``nkisim.binding.ensure_nki()`` runs first so that the kernel files' ``import nki`` resolves to the
real Neuron package where it is installed, else to the emulator.
"""
from nkisim.binding import ensure_nki

ensure_nki()

from .conv3d_bwd import conv3d_bwd  # noqa: E402
from .errors import Conv3dBwdInputError, Conv3dBwdPlanError  # noqa: E402

__all__ = ["conv3d_bwd", "Conv3dBwdInputError", "Conv3dBwdPlanError"]
