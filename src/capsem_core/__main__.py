"""``python -m capsem_core`` runs the capsem-ledger command line."""

import sys

from capsem_core.cli import main

sys.exit(main())
