"""``python -m fastreplay``: the ``fastreplay`` command."""

import sys

from fastreplay.cli import main

sys.exit(main())
