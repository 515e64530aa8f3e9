"""Deployment backends: the k-means family's stages as a Flower ServerApp and ClientApp, every sum
released through Flower's SecAgg+ (:mod:`fedclust.deploy.flower`).

Importing this package does not import Flower; its modules do (the optional ``deploy`` extra).
"""
