import sys

from qnn_ci.cli import main

sys.exit(main())
