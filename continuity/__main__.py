import sys

from continuity.cli.main import main

sys.exit(main())
