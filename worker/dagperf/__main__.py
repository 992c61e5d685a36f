import sys

from dagperf.cli import main

sys.exit(main())
