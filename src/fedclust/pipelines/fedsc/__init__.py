"""FedSC: federated spectral clustering by secure similarity reconstruction."""
