"""An error status fits in the trailers every client accepts (8 KiB by default)."""

from __future__ import annotations

import base64

from google.rpc import error_details_pb2

from service.errors import FieldViolation, InvalidArgument, to_rpc_status

CLIENT_METADATA_LIMIT = 8192


def test_hundreds_of_long_violations_still_fit_in_a_clients_trailers() -> None:
    key = "k" * 5000
    error = InvalidArgument(
        [FieldViolation(f'metadata["{key}{i}"]', "d" * 5000, "map.keys") for i in range(500)]
    )
    status = to_rpc_status(error, request_id="r")
    # grpc sends the details base64-encoded in grpc-status-details-bin, the message as is.
    size = len(base64.b64encode(status.SerializeToString())) + len(status.message)
    # Room is left for the other headers of the response (content-type, x-request-id...).
    assert size < CLIENT_METADATA_LIMIT * 0.75
    bad_request = error_details_pb2.BadRequest()
    assert status.details[0].Unpack(bad_request)
    listed = bad_request.field_violations
    assert len(listed) == InvalidArgument.MAX_VIOLATIONS + 1
    assert listed[0].field.startswith('metadata["kkk')
    assert listed[0].field.endswith("...")
    assert listed[-1].description == "492 more violations"
    assert "(and 497 more)" in status.message


def test_a_short_list_is_reported_whole() -> None:
    error = InvalidArgument([FieldViolation("query", "must not be blank", "string.not_blank")])
    assert error.message == "invalid request: query: must not be blank"
    assert [v.field for v in error.violations] == ["query"]
