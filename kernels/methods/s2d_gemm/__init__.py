"""The space-to-depth GEMM method (stride == kernel, no padding, dilation 1): see design.md."""
