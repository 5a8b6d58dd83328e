"""The machine-readable descriptions of the providers' payloads that the sample events are
checked against (tests/unit/tools/test_sample_shapes.py): each a package of a public registry
at a pinned version, downloaded by the test session and checked against the digest pinned here
before it is used.

A download that fails, or whose digest differs, fails the tests that need it (never a skip):
the samples would otherwise go unchecked without anyone noticing.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import time
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support import ROOT

ORACLE = ROOT / "tests" / "sample_oracle.py"
TIMEOUT_SECONDS = 120


@dataclass(frozen=True)
class Pinned:
    """A registry package at one version: where it is and the digest it must have (npm's
    ``integrity``, ``sha512-<base64>``; PyPI's ``sha256`` in hex)."""

    name: str
    version: str
    url: str
    digest: str

    def verify(self, content: bytes) -> None:
        algorithm, _, expected = self.digest.partition("-")
        actual = hashlib.new(algorithm, content).digest()
        as_text = base64.b64encode(actual).decode() if algorithm == "sha512" else actual.hex()
        if as_text != expected:
            raise AssertionError(
                f"{self.name} {self.version} from {self.url}: {algorithm} {as_text}, "
                f"pinned {expected}"
            )


OCTOKIT_SCHEMAS = Pinned(
    "@octokit/webhooks-schemas",
    "7.6.1",
    "https://registry.npmjs.org/@octokit/webhooks-schemas/-/webhooks-schemas-7.6.1.tgz",
    "sha512-qW0Bwtb76r4m2WzVhKDyfEeEnt1GEQoRjkCqmq2ZeB0nNVDJ+Z2LBDS9FDPyduuMXf/ZTWiCJp9PFFHgRfBe3A==",
)
SLACK_TYPES = Pinned(
    "@slack/types",
    "3.2.0",
    "https://registry.npmjs.org/@slack/types/-/types-3.2.0.tgz",
    "sha512-IN4gdtlzQt8UJoj+1v+qAHeR4TxHO0KMlIs841SFfDQAcFFnsrWaGsEAE4goxVt8O/JOAFaGGdrFTzhNBop/Fg==",
)
LINEAR_SDK = Pinned(
    "@linear/sdk",
    "98.0.0",
    "https://registry.npmjs.org/@linear/sdk/-/sdk-98.0.0.tgz",
    "sha512-DRakJJiGe4QE2tc49+XQVE0lyeR9CUHJTpCPsx5291LsmDaMvhP8+beCgXQQ7jET+OshHEm2BYtMx6EUt9ZR8Q==",
)
DISCORD_INTERACTIONS = Pinned(  # Discord's own package: the interaction and webhook event types
    "discord-interactions",
    "4.4.0",
    "https://registry.npmjs.org/discord-interactions/-/discord-interactions-4.4.0.tgz",
    "sha512-jjJx8iwAeJcj8oEauV43fue9lNqkf38fy60aSs2+G8D1nJmDxUIrk08o3h0F3wgwuBWWJUZO+X/VgfXsxpCiJA==",
)
# AWS's own SNS message validator (github.com/aws/aws-js-sns-message-validator): the oracle the
# SNS scheme's string to sign is checked against (tests/unit/ingest/test_sns_aws_validator.py).
SNS_VALIDATOR = Pinned(
    "sns-validator",
    "0.3.5",
    "https://registry.npmjs.org/sns-validator/-/sns-validator-0.3.5.tgz",
    "sha512-lapYNmezLsltnt2fcQyhmYnC41mYZ7EjU7f2oR/hrhpbD/LemryclRpApwxO84gOyDIQ7MWe/h4HvkdunFzSKg==",
)
_FILES = "https://files.pythonhosted.org/packages"
# The official SDKs whose types describe the payloads (the project's dev dependencies name the
# same packages, unpinned: these pins are what the samples are checked against).
SDKS = {
    "stripe": Pinned(
        "stripe",
        "16.1.0",
        f"{_FILES}/94/50/4ecff21d2ff5f867aa05c48b5f4338c80bae51d9dcbd943b373cb52ca71c/"
        "stripe-16.1.0-py3-none-any.whl",
        "sha256-3798e07a0603c8923710414cd1942ae847ed43cebbf34c3258417c189711ea70",
    ),
    "square": Pinned(
        "squareup",
        "46.0.0.20260916",
        f"{_FILES}/03/77/ccbe2697420486cd2d3df391ddad5bf7fa6828ef0f96026d08da34d4ee18/"
        "squareup-46.0.0.20260916-py3-none-any.whl",
        "sha256-735fcd0efad66a25cf9c6c8557cdc342bd89dd1f629cbbbbced87e4b8cdcb742",
    ),
    "paddle": Pinned(
        "paddle-python-sdk",
        "1.16.1",
        f"{_FILES}/46/87/526304b31daf8b38cfcbcfd79defdc09b9bca244cbc146e140f9ec26ac5b/"
        "paddle_python_sdk-1.16.1-py3-none-any.whl",
        "sha256-61213f3abd319a41a2f7c80ce76e1b249e2ed7ccbada91f3ce5e78a2952f9cf1",
    ),
    "twilio": Pinned(
        "twilio",
        "9.13.0",
        f"{_FILES}/2c/50/069e982c83c8a864a97cb0a247562233b230686d8c201572d1054c541be5/"
        "twilio-9.13.0-py2.py3-none-any.whl",
        "sha256-a73eb7139f47ed0ad934e9cf0a26cd0add6b86e6ca4aec5964624a9ea588c11c",
    ),
    "hubspot": Pinned(
        "hubspot-api-client",
        "12.0.0",
        f"{_FILES}/d3/bf/b417bcf30d6fc4f473f3c1ab13cbffc3a809caa464d5aa2ae43de96416d9/"
        "hubspot_api_client-12.0.0-py3-none-any.whl",
        "sha256-5426627ff808fdf259d5b5e4791667a323a2a82d36a834e7e43ec8e8f021aa08",
    ),
}


DOWNLOAD_ATTEMPTS = 3


def download(pinned: Pinned) -> bytes:
    """The package's bytes, checked against its pinned digest."""
    if not pinned.url.startswith("https://"):
        raise AssertionError(f"{pinned.name}: only https downloads ({pinned.url})")
    # A registry on a shared CI machine may drop one connection: three tries, then a failure.
    for attempt in range(DOWNLOAD_ATTEMPTS):
        try:
            with urllib.request.urlopen(pinned.url, timeout=TIMEOUT_SECONDS) as answer:  # noqa: S310 - https only, checked above
                content: bytes = answer.read()
            break
        except OSError as exc:
            if attempt + 1 == DOWNLOAD_ATTEMPTS:
                raise AssertionError(
                    f"cannot download {pinned.name} {pinned.version} from {pinned.url}: {exc}"
                ) from exc
            time.sleep(2**attempt)
    pinned.verify(content)
    return content


class Sources:
    """The session's downloads, each made once (a parallel worker is a session of its own) in a
    folder the session removes; a failed one fails every test that asks for it, at once."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._done: dict[str, Any] = {}

    def _once(self, key: str, make: Any) -> Any:
        if key not in self._done:
            try:
                self._done[key] = make()
            except AssertionError as exc:
                self._done[key] = exc
        found = self._done[key]
        if isinstance(found, AssertionError):
            raise AssertionError(str(found))
        return found

    def octokit_schema(self) -> dict[str, Any]:
        """@octokit/webhooks-schemas' schema.json: a JSON Schema per event and action."""
        path = "package/schema.json"
        schema: dict[str, Any] = json.loads(self.npm_texts(OCTOKIT_SCHEMAS, path)[path])
        return schema

    def npm_texts(self, pinned: Pinned, member: str) -> dict[str, str]:
        """The text of each file of an npm package whose path matches ``member`` (a regular
        expression), by path."""

        def make() -> dict[str, str]:
            found = {}
            with tarfile.open(fileobj=io.BytesIO(download(pinned)), mode="r:gz") as archive:
                for info in archive.getmembers():
                    if info.isfile() and re.fullmatch(member, info.name):
                        content = archive.extractfile(info)
                        if content is not None:
                            found[info.name] = content.read().decode("utf-8")
            if not found:
                raise AssertionError(f"{pinned.name} {pinned.version} has no file {member}")
            return found

        texts: dict[str, str] = self._once(f"npm:{pinned.name}:{member}", make)
        return texts

    def sdk(self, key: str) -> Path:
        """The pinned wheel of SDKS[key], unpacked: the folder to put first on the path."""

        def make() -> Path:
            pinned = SDKS[key]
            target = self.folder / f"{pinned.name}-{pinned.version}"
            with zipfile.ZipFile(io.BytesIO(download(pinned))) as wheel:
                wheel.extractall(target)  # noqa: S202 - its digest was checked: the pinned release
            return target

        found: Path = self._once(f"sdk:{key}", make)
        return found

    def check_with_sdk(self, key: str, samples: dict[str, Any]) -> dict[str, list[str]]:
        """{type: problems} for ``samples`` ({type: body}), from the pinned SDK's types."""
        root = self.sdk(key)
        env = {**os.environ, "PYTHONPATH": str(root)}
        done = subprocess.run(
            [sys.executable, str(ORACLE), SDKS[key].name, str(root)],
            input=json.dumps(samples),
            capture_output=True,
            text=True,
            env=env,
            timeout=TIMEOUT_SECONDS,
            check=False,
        )
        if done.returncode != 0:
            raise AssertionError(f"the {key} oracle failed:\n{done.stderr[-4000:]}")
        results: dict[str, list[str]] = json.loads(done.stdout)
        return results
