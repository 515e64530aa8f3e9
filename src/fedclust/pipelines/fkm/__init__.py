"""Federated k-means (federated Lloyd): the foundation's end-to-end method."""
