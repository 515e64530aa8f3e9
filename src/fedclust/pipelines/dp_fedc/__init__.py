"""DP-FedC: differentially private federated clustering over non-IID data."""
