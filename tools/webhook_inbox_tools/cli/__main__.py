"""``python -m webhook_inbox_tools.cli`` — the same as the ``webhook-inbox`` console script."""

import sys

from webhook_inbox_tools.cli.app import main

sys.exit(main())
