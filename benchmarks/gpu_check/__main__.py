"""python -m benchmarks.gpu_check: the GPU check's command line (benchmarks/gpu_check/run.py)."""

import sys

from benchmarks.gpu_check.run import main

sys.exit(main())
