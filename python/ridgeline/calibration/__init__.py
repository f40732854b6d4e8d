"""Calibration (spec 50): measured rows decomposed at efficiency 1 (``decompose``), the fits
(``calibrate``, ``kernel_fit``, ``comm_fit``, ``power_fit``) from their row sources (``kernels``),
held-out acceptance (``acceptance``) and the validation reports (``validate``)."""
