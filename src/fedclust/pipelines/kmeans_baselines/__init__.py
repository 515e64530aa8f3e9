"""The k-means-family baselines of DP-FedC's Table I: FZKM, DK++, DKM (our reimplementations)."""
