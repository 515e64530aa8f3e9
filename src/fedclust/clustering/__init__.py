"""Federated data clustering: one module per method (fkm, dp_fedc, fedc_mf, fedsc, baselines)."""
