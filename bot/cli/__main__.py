"""`python -m bot.cli`: the same as the `kv-parity` script."""

import sys

from bot.cli.main import main

sys.exit(main())
