import sys

from dagperf_operator.cli import main

sys.exit(main())
