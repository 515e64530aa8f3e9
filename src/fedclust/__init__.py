"""fedclust: differentially private federated clustering, reproduced and compared.

Library code (everything outside :mod:`fedclust.pipelines`) is free of Kedro, so that a notebook
or another project can call, for example, ``fedclust.clustering.fkm.run(...)`` directly.
"""

__version__ = "0.1.0"
