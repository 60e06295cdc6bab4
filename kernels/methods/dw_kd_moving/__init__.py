"""dw with the kd taps x C_out on the moving axis (small channel counts, stride 1 along D): see design.md."""
