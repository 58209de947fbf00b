"""The server's interceptor chain: one module per concern, their order chosen in server.py.

- :mod:`.call`: what a call carries, read from its context once when it starts;
- :mod:`.layers`: request ids, the access log, validation;
- :mod:`.chain`: the wrapper around every call shape, request decoding and error mapping.
"""

from service.api.interceptors.call import REQUEST_ID_HEADER, Call, current_request_id
from service.api.interceptors.chain import Chain
from service.api.interceptors.layers import AccessLog, Layer, RequestIds, Validation
from service.api.interceptors.validation import field_path, validate

__all__ = [
    "REQUEST_ID_HEADER",
    "AccessLog",
    "Call",
    "Chain",
    "Layer",
    "RequestIds",
    "Validation",
    "current_request_id",
    "field_path",
    "validate",
]
