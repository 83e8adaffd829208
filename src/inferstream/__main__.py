"""`python -m inferstream` is the `inferstream` command."""

import sys

from inferstream.cli import main

sys.exit(main())
