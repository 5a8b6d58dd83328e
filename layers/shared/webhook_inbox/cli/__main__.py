"""``python -m webhook_inbox.cli`` — the same as the ``webhook-inbox`` console script."""

import sys

from webhook_inbox.cli.app import main

sys.exit(main())
