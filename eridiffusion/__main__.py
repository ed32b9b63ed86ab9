"""`python -m eridiffusion train CONFIG.yaml`: the command line of eridiffusion/headless/cli.py."""

import sys

from .headless.cli import main

sys.exit(main())
