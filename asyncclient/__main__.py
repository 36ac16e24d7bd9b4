"""`python -m asyncclient`: the same as the `asyncclient` command."""

import sys

from asyncclient.cli import main

sys.exit(main())
