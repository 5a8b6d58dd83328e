"""The pieces of `webhook-inbox dev` that imitate AWS: API Gateway events, partial batch rules."""

import base64

from webhook_inbox_tools.dev.apigw import apigw_response_to_http, http_to_apigw_v2
from webhook_inbox_tools.dev.lambda_runtime import failed_message_ids

BATCH = [{"MessageId": "a"}, {"MessageId": "b"}, {"MessageId": "c"}]


def _event(content_type: str, body: bytes) -> dict[str, object]:
    return http_to_apigw_v2(
        method="POST",
        path="/webhooks/stripe",
        query="",
        headers=[("Content-Type", content_type), ("X-Dup", "1"), ("x-dup", "2")],
        body=body,
        source_ip="127.0.0.1",
        route_key="POST /webhooks/{provider}",
        path_parameters={"provider": "stripe"},
    )


def test_json_bodies_pass_as_text_and_headers_are_lowercased_and_joined() -> None:
    event = _event("application/json; charset=utf-8", b'{"a":1}')
    assert event["body"] == '{"a":1}'
    assert event["isBase64Encoded"] is False
    assert event["headers"] == {
        "content-type": "application/json; charset=utf-8",
        "x-dup": "1,2",
        "x-forwarded-proto": "https",  # API Gateway adds it
    }


def test_other_bodies_arrive_base64_encoded_as_http_apis_send_them() -> None:
    event = _event("application/x-www-form-urlencoded", b"payload=%7B%7D")
    assert event["isBase64Encoded"] is True
    assert base64.b64decode(str(event["body"])) == b"payload=%7B%7D"


def test_response_mapping() -> None:
    assert apigw_response_to_http({"statusCode": 202, "body": "{}"}) == (202, {}, b"{}")
    encoded = {
        "statusCode": 200,
        "body": base64.b64encode(b"\x00").decode(),
        "isBase64Encoded": True,
    }
    assert apigw_response_to_http(encoded)[2] == b"\x00"


def test_partial_batch_response_rules() -> None:
    assert failed_message_ids({"batchItemFailures": []}, BATCH) == set()
    assert failed_message_ids(None, BATCH) == set()
    assert failed_message_ids({"batchItemFailures": [{"itemIdentifier": "b"}]}, BATCH) == {"b"}
    # An identifier Lambda cannot match fails the whole batch.
    assert failed_message_ids({"batchItemFailures": [{"itemIdentifier": ""}]}, BATCH) == {
        "a", "b", "c",
    }  # fmt: skip
    assert failed_message_ids({"batchItemFailures": [{"itemIdentifier": "zz"}]}, BATCH) == {
        "a", "b", "c",
    }  # fmt: skip


def test_the_dev_processor_line_names_the_rows_of_single_and_re_wake_messages() -> None:
    from webhook_inbox_tools.dev.workers import _row_id

    assert _row_id({"Body": '{"id": 3}'}) == "3"
    assert _row_id({"Body": '{"ids": [3, 4]}'}) == "3+4"  # a sweeper's re-wake (issue 24)
    assert _row_id({"Body": "not json"}) == "?"
