"""The lab: what measures the project, apart from the product (``cleanrl/``, ``cleanrl_utils/``), which never imports
it. Run its modules from the repository's root (``python -m benchmark.lab.throughput``) or through benchmark/*.sh."""

import cleanrl_utils  # noqa: F401  (first: sets the OpenMP thread policy before torch loads)
