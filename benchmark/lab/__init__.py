"""The lab: what measures the project (throughput, learning, the claims about parallel sampling, the GPU check, host
syncs, the inference loop's profile), apart from the product that users run and import (``cleanrl/``,
``cleanrl_utils/``). The lab imports the product, never the other way round (tests/test_layout.py).

Run its modules from the repository's root, ``python -m benchmark.lab.throughput`` and so on, or through the shell
scripts of ``benchmark/``. Importing this package imports ``cleanrl_utils`` first, so that every entry point of the
lab gets the scripts' OpenMP thread policy before torch loads (cleanrl_utils/__init__.py).
"""

import cleanrl_utils  # noqa: F401  (first: sets the OpenMP thread policy before torch loads)
