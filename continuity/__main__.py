import sys

from continuity.cli import main

sys.exit(main())
