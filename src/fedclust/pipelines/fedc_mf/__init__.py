"""FedCAvg and FedCGds: matrix-factorization federated clustering (spec 003)."""
