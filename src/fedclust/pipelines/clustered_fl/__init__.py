"""Clustered federated learning pipelines: IFCA, CFL-MGD, FedAvg (and RR-Cluster with its DP baselines)."""
