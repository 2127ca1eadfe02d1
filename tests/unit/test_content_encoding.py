from __future__ import annotations

import gzip
import zlib

import pytest

from lambdaserve.errors import InvalidInput, PayloadTooLarge
from lambdaserve.protocol.content_encoding import decode_body


def test_gzip_and_deflate_bodies_decode_and_identity_passes_through():
    body = b'{"inputs": []}'
    assert decode_body(gzip.compress(body), "gzip", 100) == body
    assert decode_body(zlib.compress(body), "Deflate", 100) == body
    assert decode_body(body, None, 100) == decode_body(body, "identity", 100) == body


def test_the_limit_applies_to_the_decompressed_size():
    bomb = gzip.compress(b" " * 10_000)  # a few dozen bytes that expand 10,000
    with pytest.raises(PayloadTooLarge, match="decompresses to over the 1000-byte limit"):
        decode_body(bomb, "gzip", 1000)


@pytest.mark.parametrize(
    ("body", "encoding", "message"),
    [
        (b"not gzip", "gzip", "not valid gzip data"),
        (gzip.compress(b"x" * 100, mtime=0)[:20], "gzip", "truncated"),
        (b"{}", "br", "Unsupported compression type: Content-Encoding 'br' is not supported"),
    ],
)
def test_bad_encodings_are_400s_saying_what_is_wrong(body, encoding, message):
    with pytest.raises(InvalidInput, match=message):
        decode_body(body, encoding, 1000)
