"""Kernels and published hardware figures that hold nkisim's cost model to measured trn2 results
(``docs/nkisim-cost-model.md``, "Calibration")."""
