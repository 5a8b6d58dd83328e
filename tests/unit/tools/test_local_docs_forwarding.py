"""docs/local.md's "Receiving a real provider's deliveries" stays true to the code (issue 29
item 7): the forwarding target is dev's default port and route, and every configuration it shows
loads as a provider configuration."""

from __future__ import annotations

import json
import re

from tests.support import ROOT
from webhook_inbox.ingest import providers
from webhook_inbox_tools.cli.app import build_parser
from webhook_inbox_tools.dev.gateway import ROUTE

LOCAL_MD = (ROOT / "docs" / "local.md").read_text()
SECTION = LOCAL_MD.split("## Receiving a real provider's deliveries", 1)[1].split("\n## ", 1)[0]


def test_the_forwarding_target_is_devs_default_port_and_route() -> None:
    target = re.search(r"stripe listen --forward-to localhost:(\d+)(/\S+)", SECTION)
    assert target, SECTION
    dev = build_parser().parse_args(["dev"])
    assert int(target[1]) == dev.port
    assert ROUTE.match(target[2])
    assert re.search(r"https://<that host>/webhooks/<provider>", SECTION)


def test_every_configuration_shown_loads_and_the_url_signed_one_sets_public_url() -> None:
    blocks = re.findall(r"```json\n(.*?)```", SECTION, re.DOTALL)
    assert len(blocks) == 2
    loaded = [providers.load_config_text(block) for block in blocks]
    assert loaded[0]["stripe"].scheme.name == "stripe"
    twilio = loaded[1]["twilio"]
    assert twilio.scheme.signs_url
    assert twilio.public_url == "https://<name>.trycloudflare.com/webhooks/twilio"
    assert json.loads(blocks[1])["providers"]["twilio"]["public_url"].endswith("/webhooks/twilio")
