"""``cryptography`` is loaded by the first public-key verification, never by importing ingest or
loading a configuration (public keys, or the sample's private ones): HMAC-only deployments, and
HMAC deliveries of a mixed one, keep their cold start (issue 17). Checked in a fresh
interpreter, whose ``sys.modules`` holds only what the steps imported."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from tests.cert_authority import SNS_CERT_URL, TOPIC, leaf
from tests.support import ROOT
from tests.token_keys import public_jwk
from webhook_inbox.ingest import schemes

# Each step reports whether cryptography is loaded once it has run.
CHILD = r"""
import importlib.util, json, sys
from pathlib import Path

root, config, deliveries = Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
sample = (root / "events/providers.local.json").read_text()
loaded = {}
spec = importlib.util.spec_from_file_location("ingest_app", root / "functions/ingest/app.py")
app = importlib.util.module_from_spec(spec)
spec.loader.exec_module(app)
loaded["import the ingest function"] = "cryptography" in sys.modules
from webhook_inbox.ingest import providers
from webhook_inbox.ingest.schemes import Delivery
registry = providers.load_config_text(config)
loaded["load a config of HMAC secrets and public keys"] = "cryptography" in sys.modules
providers.load_config_text(sample)
loaded["load the sample config (private keys)"] = "cryptography" in sys.modules
for name, headers, body, now in deliveries:
    registry[name].verify(Delivery(headers, body.encode()), now=now)
    loaded[f"verify a {name} delivery"] = "cryptography" in sys.modules
print(json.dumps(loaded))
"""

STRIPE_SECRET = "whsec_lazy_crypto_test"
DISCORD_PEM = (
    "-----BEGIN PRIVATE KEY-----\n"
    "MC4CAQAwBQYDK2VwBCIEIGRldi1vbmx5LWRpc2NvcmQtTk9ULUZPUi1QUk9EISEh\n"
    "-----END PRIVATE KEY-----\n"
)
DISCORD_PUBLIC = "48fcf58fd4c99945a49af888407b8a6fcd6256f8c48f4d4f55d51292c3b96606"
SENDGRID_KEY = (
    "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE83T4O/n84iotIvIW4mdBgQ/7dAfSmpqIM8kF9mN1flpVKS3GRqe62gw"
    "+2fNNRaINXvVpiglSI8eNEc6wEA3F+g=="
)
WHPK = "whpk_EFF33xEw6AqHWe6OXHa5KXumncbdchnP51wg9DUIkO0="


def test_cryptography_is_imported_by_the_first_public_key_verification_only() -> None:
    config = {
        "providers": {
            "stripe": {"scheme": "stripe", "secrets": [{"value": STRIPE_SECRET}]},
            "discord": {
                "scheme": "discord",
                "options": {"endpoint": "interactions"},
                "secrets": [{"value": DISCORD_PUBLIC}],
            },
            "sendgrid": {"scheme": "sendgrid", "secrets": [{"value": SENDGRID_KEY}]},
            "v1a": {"scheme": "standard-webhooks", "secrets": [{"value": WHPK}]},
            # Certificate senders: a pinned certificate (read by its shape) and one that fetches.
            "sns": {
                "scheme": "sns",
                "options": {"topic_arns": [TOPIC], "certificates": "pinned"},
                "secrets": [{"value": leaf().pin(SNS_CERT_URL)}],
            },
            "paypal": {"scheme": "paypal", "options": {"webhook_id": "WH1"}},
            # Token senders: pinned JWKs (read without the library) and Apple's embedded root.
            "google-pubsub": {
                "scheme": "google-pubsub",
                "options": {"audience": "https://x.example/h", "service_account_email": "a@b.c"},
                "secrets": [{"value": json.dumps(public_jwk("lazy-google"))}],
            },
            "plaid": {
                "scheme": "plaid",
                "secrets": [{"value": json.dumps(public_jwk("lazy-plaid", "ec"))}],
            },
            "app-store": {"scheme": "app-store", "options": {"bundle_id": "com.example.app"}},
        }
    }
    now = int(time.time())
    stripe_body = '{"id":"evt_1","type":"t"}'
    discord_body = '{"type":1,"id":"1"}'
    deliveries = [
        ("stripe", schemes.Stripe().sign(STRIPE_SECRET, stripe_body.encode(), timestamp=now)),
        ("discord", schemes.build("discord", {"endpoint": "interactions"}).sign(
            DISCORD_PEM, discord_body.encode(), timestamp=now
        )),
    ]  # fmt: skip
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD,
            str(ROOT),
            json.dumps(config),
            json.dumps([(n, s.headers, s.body.decode(), now) for n, s in deliveries]),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(child.stdout.splitlines()[-1]) == {
        "import the ingest function": False,
        "load a config of HMAC secrets and public keys": False,  # and pinned certificates
        "load the sample config (private keys)": False,
        "verify a stripe delivery": False,
        "verify a discord delivery": True,
    }


SCHEME_MODULES_CHILD = r"""
import json, sys
import webhook_inbox.ingest.pipeline
from webhook_inbox.ingest import providers
before = sorted(m for m in sys.modules if m.startswith("webhook_inbox.ingest.schemes."))
providers.load_config_text(sys.argv[1])
after = sorted(m for m in sys.modules if m.startswith("webhook_inbox.ingest.schemes."))
print(json.dumps([before, after]))
"""


def test_a_scheme_module_is_imported_when_a_provider_uses_it_not_with_ingest() -> None:
    config = {"providers": {"stripe": {"scheme": "stripe", "secrets": [{"value": STRIPE_SECRET}]}}}
    child = subprocess.run(
        [sys.executable, "-c", SCHEME_MODULES_CHILD, json.dumps(config)],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    before, after = json.loads(child.stdout)
    assert before == ["webhook_inbox.ingest.schemes.base"]
    assert after == ["webhook_inbox.ingest.schemes.base", "webhook_inbox.ingest.schemes.stripe"]


def test_every_scheme_name_builds_the_scheme_of_that_name() -> None:
    assert len(schemes.SCHEMES) == 55
    for name, cls in schemes.SCHEMES.items():
        assert cls.name == name
        assert getattr(schemes, cls.__name__) is cls
