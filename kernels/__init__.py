"""The conv3d backward NKI kernel and its planner.

``nkisim.binding.ensure_nki()`` runs first so that the kernel files' ``import nki`` resolves to the
real Neuron package where it is installed, else to the emulator.
"""
from conv3d_bwd.nkisim.binding import ensure_nki

ensure_nki()

from .conv3d_bwd import conv3d_bwd
from .errors import Conv3dBwdInputError, Conv3dBwdPlanError

__all__ = ["Conv3dBwdInputError", "Conv3dBwdPlanError", "conv3d_bwd"]
