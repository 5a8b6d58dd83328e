"""AWS's own SNS validator (npm ``sns-validator``, github.com/aws/aws-js-sns-message-validator,
pinned in tests/sample_sources.py) verifies messages the SNS scheme signs, and the scheme verifies
what the validator accepts: the string to sign, both signature versions, a Subject, and a
SubscriptionConfirmation. The validator's certificate download is answered in-process with the
test certificate (no network beyond the package download).

Not compared: an UnsubscribeConfirmation. That validator signs it with the Notification field
list (no ``Token``), where AWS's documentation, which the scheme follows, lists ``Token`` for
both confirmation types."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cert_authority import SNS_CERT_URL, TOPIC, leaf
from tests.conftest import SESSION_TMP
from tests.sample_sources import SNS_VALIDATOR, Sources
from webhook_inbox.ingest import schemes

NODE = shutil.which("node")
# The validator's https.get answers with the test certificate; prints each message's verdict.
RUNNER = r"""
const https = require('https');
const { EventEmitter } = require('events');
const [validatorPath, certificate, messagesJson] = process.argv.slice(1);  // -e: no script
https.get = (url, onAnswer) => {
  const answer = new EventEmitter();
  answer.statusCode = 200;
  const request = new EventEmitter();
  setImmediate(() => {
    onAnswer(answer);
    answer.emit('data', Buffer.from(certificate));
    answer.emit('end');
  });
  return request;
};
const MessageValidator = require(validatorPath);
const messages = JSON.parse(messagesJson);
const verdicts = [];
let pending = messages.length;
messages.forEach((message, index) => {
  new MessageValidator().validate(message, (error) => {
    verdicts[index] = error ? String(error.message) : 'valid';
    if (--pending === 0) console.log(JSON.stringify(verdicts));
  });
});
"""
NOW = int(time.time())


@pytest.fixture(scope="module")
def validator() -> Iterator[Path]:
    if NODE is None:
        pytest.fail("node is needed for AWS's SNS validator (the oracle of the SNS scheme)")
    folder = Path(tempfile.mkdtemp(prefix="sns-validator-", dir=SESSION_TMP))
    try:
        texts = Sources(folder).npm_texts(SNS_VALIDATOR, "package/index.js")
        path = folder / "index.js"
        path.write_text(texts["package/index.js"])
        yield path
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def aws_verdicts(validator: Path, messages: list[dict[str, Any]]) -> list[str]:
    assert NODE is not None
    done = subprocess.run(
        [NODE, "-e", RUNNER, str(validator), leaf().certificate_pem, json.dumps(messages)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    verdicts: list[str] = json.loads(done.stdout)
    return verdicts


def sns() -> schemes.Scheme:
    return schemes.build("sns", {"topic_arns": [TOPIC]})


def signed(document: dict[str, Any]) -> dict[str, Any]:
    made = sns().sign(leaf().pin(SNS_CERT_URL), json.dumps(document).encode(), timestamp=NOW)
    return dict(json.loads(made.body))


MESSAGES = [
    {"Type": "Notification", "Message": "hello", "SignatureVersion": "1"},
    {"Type": "Notification", "Message": "hello", "SignatureVersion": "2"},
    {
        "Type": "Notification",
        "Message": "héllo\nwörld",
        "Subject": "Ünïcode",
        "SignatureVersion": "2",
    },
    {
        "Type": "SubscriptionConfirmation",
        "Message": "You have chosen to subscribe",
        "Token": "2336412f37fb687f5d51e6e2425",
        "SubscribeURL": "https://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription&Token=2",
        "SignatureVersion": "1",
    },
]


def test_aws_s_validator_accepts_what_the_scheme_signs(validator: Path) -> None:
    messages = [signed(m) for m in MESSAGES]
    assert aws_verdicts(validator, messages) == ["valid"] * len(messages)
    # And the scheme verifies each of them (the same bytes the validator judged).
    pin = leaf().pin(SNS_CERT_URL, with_key=False)
    for message in messages:
        delivery = schemes.Delivery({}, json.dumps(message).encode())
        assert sns().verify(delivery, [pin], now=NOW, tolerance=3600).signed_id


def test_aws_s_validator_refuses_what_the_scheme_refuses(validator: Path) -> None:
    changed = [
        {**signed(MESSAGES[1]), "Message": "hello!"},
        {**signed(MESSAGES[2]), "Subject": "other"},
        {**signed(MESSAGES[3]), "Token": "other"},
    ]
    assert all(v == "The message signature is invalid." for v in aws_verdicts(validator, changed))
