"""AWS SNS HTTP/S subscriptions: RSA over a string of named fields, with the certificate the
message names at ``SigningCertURL`` (:mod:`.certificates` fetches, caches or pins it).

``SignatureVersion`` 1 is SHA1withRSA, 2 SHA256withRSA (``options.minimum_signature_version``
refuses 1). The string to sign is ``"Key\\nvalue\\n"`` for each field in this order, a field
that is absent skipped (only ``Subject`` may be): for a ``Notification`` Message, MessageId,
Subject, Timestamp, TopicArn, Type; for a ``SubscriptionConfirmation`` or
``UnsubscribeConfirmation`` Message, MessageId, SubscribeURL, Timestamp, Token, TopicArn, Type
(as AWS documents it, and as AWS's own validator, npm ``@aws-sdk/sns-message-validator``, builds
it). ``MessageAttributes``, ``UnsubscribeURL`` and ``SigningCertURL`` are not signed.

Checks, in order, before anything is fetched: ``TopicArn`` is one of ``options.topic_arns`` (a
foreign topic is refused, and never confirmed), ``SigningCertURL`` is HTTPS on the SNS host of
that topic's region. Then the signature, then ``Timestamp`` within the tolerance: SNS signs a
message once and its retries repeat it, for at most an hour (the HTTP/S delivery policy's hard
limit), so the default tolerance is 3600 s; a replay inside it only meets its signed
``MessageId``'s row.

A ``SubscriptionConfirmation`` for an allowed topic is confirmed by a GET of its signed
``SubscribeURL`` (the same region's SNS host, ``Action=ConfirmSubscription``) and answered 200;
an ``UnsubscribeConfirmation`` is answered 200 and nothing else. Neither is stored unless
``options.store_confirmations``. Raw message delivery carries no signature: refused (401) unless
``options.accept_unsigned_raw_delivery``, which stores it keyed by a digest of its topic and
body (its ``x-amz-sns-message-id`` header is unsigned).

The event type is the topic's name, or with ``options.type_path`` a field of the ``Message``
when that is a JSON object holding it (SES's ``notificationType``, EventBridge's
``detail-type``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from webhook_inbox.errors import AuthenticationFailed, ConfigurationError, InvalidPayload
from webhook_inbox.ingest import bodies
from webhook_inbox.ingest.schemes import base, certificates
from webhook_inbox.ingest.schemes.base import Delivery, Identity, Reply, Signed, Verified
from webhook_inbox.ingest.schemes.certificates import CertificateScheme, UrlRule

NOTIFICATION = "Notification"
SUBSCRIBE = "SubscriptionConfirmation"
UNSUBSCRIBE = "UnsubscribeConfirmation"
_FIELDS = {
    NOTIFICATION: ("Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"),
    SUBSCRIBE: ("Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type"),
}
_FIELDS[UNSUBSCRIBE] = _FIELDS[SUBSCRIBE]
_DIGESTS = {"1": "sha1", "2": "sha256"}
# AWS's validator's host rule; the region is then held to the topic's own.
SNS_HOST = re.compile(r"sns\.[a-zA-Z0-9\-]{3,}\.amazonaws\.com(\.cn)?")
CERTIFICATE_URLS = UrlRule(
    "SNS SigningCertURL", SNS_HOST, re.compile(r"/[A-Za-z0-9_\-]{1,200}\.pem")
)
_SUBSCRIBE_URLS = UrlRule("SNS SubscribeURL", SNS_HOST, re.compile(r"/?"), query=True)
TOPIC_ARN = re.compile(r"arn:(aws[a-z\-]*):sns:([a-z0-9\-]{3,}):[0-9]{12}:[A-Za-z0-9_\-.]{1,256}")
_CONFIRMED = Reply.json({"status": "subscription confirmed"})
_UNSUBSCRIBED = Reply.json({"status": "unsubscribe noted"})


def string_to_sign(message: Mapping[str, Any]) -> bytes:
    """The bytes SNS signs for ``message`` (a dict of the envelope's fields)."""
    fields = _FIELDS.get(message.get("Type"))  # type: ignore[arg-type]
    if fields is None:
        raise base.fail("Type is not an SNS message type")
    parts = []
    for name in fields:
        value = message.get(name)
        if value is None and name == "Subject":
            continue
        if not isinstance(value, str):
            raise base.fail(f"{name} is missing or not a string")
        parts.append(f"{name}\n{value}\n")
    return "".join(parts).encode("utf-8")


def _region_host(topic_arn: str) -> str:
    match = TOPIC_ARN.fullmatch(topic_arn)
    if match is None:  # never: the allow-list's entries match
        raise base.fail("TopicArn is not an SNS topic ARN")
    suffix = ".amazonaws.com.cn" if match[1] == "aws-cn" else ".amazonaws.com"
    return f"sns.{match[2]}{suffix}"


class Sns(CertificateScheme):
    name = "sns"
    certificate_rule = CERTIFICATE_URLS
    default_tolerance_s = 3600
    option_names = frozenset(
        {
            "topic_arns",
            "certificates",
            "minimum_signature_version",
            "store_confirmations",
            "accept_unsigned_raw_delivery",
            "type_path",
        }
    )
    accepted_status = 200  # SNS counts any 2xx; 200 is what its docs show

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        topics = self.options.get("topic_arns")
        if (
            not isinstance(topics, list)
            or not topics
            or not all(isinstance(t, str) and TOPIC_ARN.fullmatch(t) for t in topics)
        ):
            raise ConfigurationError(
                "sns: options.topic_arns lists the topic ARNs allowed to deliver here "
                "(arn:aws:sns:REGION:ACCOUNT:NAME)"
            )
        self.topic_arns = frozenset(topics)
        minimum = self.options.get("minimum_signature_version", 1)
        if minimum not in (1, 2):
            raise ConfigurationError("sns: options.minimum_signature_version is 1 or 2")
        self.versions = {v: d for v, d in _DIGESTS.items() if int(v) >= minimum}
        for flag in ("store_confirmations", "accept_unsigned_raw_delivery"):
            if not isinstance(self.options.get(flag, False), bool):
                raise ConfigurationError(f"sns: options.{flag} is true or false")
        type_path = self.options.get("type_path")
        if type_path is not None and (not isinstance(type_path, str) or not type_path):
            raise ConfigurationError("sns: options.type_path is a dotted path into the Message")
        self.type_path: str | None = type_path

    def _allowed_topic(self, topic_arn: Any) -> str:
        if not isinstance(topic_arn, str) or topic_arn not in self.topic_arns:
            raise AuthenticationFailed("TopicArn is not one of options.topic_arns")
        return topic_arn

    def verify(
        self, delivery: Delivery, secrets: Sequence[str], *, now: int, tolerance: int
    ) -> Verified:
        if delivery.headers.get("x-amz-sns-rawdelivery", "").lower() == "true":
            if not self.options.get("accept_unsigned_raw_delivery", False):
                raise base.fail("raw message delivery carries no signature (refused)")
            self._allowed_topic(delivery.headers.get("x-amz-sns-topic-arn"))
            return Verified()
        try:
            message = bodies.json_object(delivery.body)
        except InvalidPayload:
            raise base.fail("the body is not an SNS message (a JSON object)") from None
        kind = message.get("Type")
        header_kind = delivery.headers.get("x-amz-sns-message-type")
        if header_kind is not None and header_kind != kind:
            raise base.fail("x-amz-sns-message-type disagrees with Type")
        topic_arn = self._allowed_topic(message.get("TopicArn"))
        digest = self.versions.get(message.get("SignatureVersion"))  # type: ignore[arg-type]
        if digest is None:
            raise base.fail("SignatureVersion is not one this provider accepts")
        url = certificates.checked_url(message.get("SigningCertURL"), CERTIFICATE_URLS)
        if urlsplit(url).hostname != _region_host(topic_arn):
            raise base.fail("SigningCertURL is not the SNS host of the topic's region")
        signature = certificates.signature_bytes(message.get("Signature"), "Signature")
        signed = string_to_sign(message)
        timestamp = certificates.rfc3339_seconds(message.get("Timestamp"), "Timestamp")
        self.verify_with_certificate(url, secrets, signed, signature, digest=digest, now=now)
        base.check_fresh(timestamp, now, tolerance)
        message_id = base.bounded_text(message.get("MessageId"), "MessageId", base.MAX_ID_CHARS)
        return Verified(signed_id=message_id, timestamp=timestamp, payload=message)

    def parse(self, delivery: Delivery) -> Any:
        """A raw delivery's body as the envelope a signed one would have, so a handler reads
        ``Message`` either way (the other fields from SNS's unsigned headers)."""
        headers = delivery.headers
        return {
            "Type": NOTIFICATION,
            "TopicArn": headers.get("x-amz-sns-topic-arn"),
            "MessageId": base.optional_header(headers, "x-amz-sns-message-id"),
            "Message": _text(delivery.body),
            "RawDelivery": True,
        }

    def _event_type(self, topic_arn: str, message: Any) -> str:
        if self.type_path and isinstance(message, str):
            try:
                document = json.loads(message)
            except (ValueError, RecursionError):
                document = None
            if isinstance(document, Mapping):
                found = base.json_path(document, self.type_path)
                if isinstance(found, str) and found:
                    return base.bounded_text(found, "event type", base.MAX_TYPE_CHARS)
        return base.bounded_text(topic_arn.rsplit(":", 1)[-1], "topic name", base.MAX_TYPE_CHARS)

    def identify(
        self, delivery: Delivery, payload: Any, verified: Verified
    ) -> list[Identity] | Reply:
        if not isinstance(payload, Mapping):
            raise InvalidPayload("an SNS message is a JSON object")
        topic_arn = payload.get("TopicArn")
        if not isinstance(topic_arn, str) or not TOPIC_ARN.fullmatch(topic_arn):
            raise InvalidPayload("TopicArn is missing or not an SNS topic ARN")
        if verified.signed_id is None:  # a raw delivery, accepted unsigned
            message_id = payload.get("MessageId")
            return [
                Identity(
                    event_id=base.body_digest_id(topic_arn, delivery.body),
                    event_type=self._event_type(topic_arn, payload.get("Message")),
                    delivery_id=message_id if isinstance(message_id, str) else None,
                )
            ]
        message_id = base.bounded_text(verified.signed_id, "MessageId", base.MAX_ID_CHARS)
        kind = payload.get("Type")
        if kind == NOTIFICATION:
            return [Identity(message_id, self._event_type(topic_arn, payload.get("Message")))]
        if kind == SUBSCRIBE:
            self._confirm(topic_arn, payload.get("SubscribeURL"))
            reply = _CONFIRMED
        elif kind == UNSUBSCRIBE:
            reply = _UNSUBSCRIBED  # nothing to do: the subscription is not renewed
        else:
            raise InvalidPayload("Type is not an SNS message type")
        if self.options.get("store_confirmations", False):
            return [Identity(message_id, kind)]
        return reply

    @staticmethod
    def _confirm(topic_arn: str, subscribe_url: Any) -> None:
        """GET the signed SubscribeURL: only the topic's region's ConfirmSubscription."""
        try:
            url = certificates.checked_url(subscribe_url, _SUBSCRIBE_URLS)
        except AuthenticationFailed:
            raise InvalidPayload("SubscribeURL is not an SNS URL") from None
        parts = urlsplit(url)
        if parts.hostname != _region_host(topic_arn) or "Action=ConfirmSubscription" not in (
            parts.query.split("&")
        ):
            raise InvalidPayload("SubscribeURL is not this region's ConfirmSubscription")
        from webhook_inbox.ingest.schemes import certificate_fetch  # a download's imports

        certificate_fetch.https_get(url, what="subscription confirmation", cause="confirm_failed")

    def sign(
        self,
        secret: str,
        body: bytes,
        *,
        timestamp: int,
        event_id: str | None = None,
        event_type: str | None = None,
        url: str = "",
    ) -> Signed:
        """``body`` (an SNS message without its signature fields, or any text to publish as a
        Notification's Message) signed with a development pin, SignatureVersion 2 unless the
        message names 1."""
        import uuid
        from datetime import UTC, datetime

        pin, private_key = self.signing_pin(secret)
        document = base.object_to_sign(body)
        if document is None or "Type" not in document:
            try:
                document = {"Type": NOTIFICATION, "Message": body.decode("utf-8")}
            except UnicodeDecodeError:
                raise ConfigurationError("sns: a Message is UTF-8 text") from None
        document.setdefault("MessageId", event_id or str(uuid.uuid4()))
        document.setdefault("TopicArn", sorted(self.topic_arns)[0])
        stamp = datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
        document["Timestamp"] = stamp
        document.setdefault("SignatureVersion", "2")
        document["SigningCertURL"] = pin.url
        digest = _DIGESTS[str(document["SignatureVersion"])]
        signature = certificates.sign_rsa(private_key, string_to_sign(document), digest=digest)
        document["Signature"] = base64_text(signature)
        headers = {
            "x-amz-sns-message-type": str(document["Type"]),
            "x-amz-sns-message-id": str(document["MessageId"]),
            "x-amz-sns-topic-arn": str(document["TopicArn"]),
            "Content-Type": "text/plain; charset=UTF-8",
        }
        return Signed(headers, json.dumps(document, indent=2).encode(), url)


def _text(body: bytes) -> str:
    try:
        return base.storable(body.decode("utf-8"), "body")
    except UnicodeDecodeError:
        raise InvalidPayload("a raw message is not UTF-8 text") from None


def base64_text(raw: bytes) -> str:
    import base64

    return base64.b64encode(raw).decode()
