"""The URL a URL-signed sender (Twilio, Square, HubSpot) called, as its schemes sign it."""

from __future__ import annotations

from webhook_inbox.ingest.schemes.base import Delivery, fail


def called_url(delivery: Delivery) -> str:
    """The delivery's URL, or a 401 when there is none or it cannot be signed.

    Ingest rebuilds it from the event (or takes ``public_url``); parts of it come from the
    request (the Host header, a decoded path), so it may hold what no sender signs: a lone
    surrogate would fail the UTF-8 encoding every scheme signs over.
    """
    url = delivery.url
    if not url:
        raise fail("no URL to verify against")
    try:
        url.encode("utf-8")
    except UnicodeEncodeError:
        raise fail("URL is not valid text") from None
    return url
