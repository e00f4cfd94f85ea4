import sys

from soulflow.cli.main import main

sys.exit(main())
