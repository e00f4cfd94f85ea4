import sys

from soulflow.cli import main

sys.exit(main())
