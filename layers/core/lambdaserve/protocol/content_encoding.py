"""``Content-Encoding: gzip | deflate`` request bodies, as tritonclient sends them with
``request_compression_algorithm``: decompressed with the request limit applied to the
decompressed size, so a small compressed body cannot expand past it."""

from __future__ import annotations

import zlib

from lambdaserve.errors import InvalidInput, PayloadTooLarge, UnsupportedEncoding

# zlib's wbits: gzip framing; zlib framing (what HTTP's "deflate" is, and tritonclient sends)
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


def decode_body(body: bytes, encoding: str | None, limit: int) -> bytes:
    """The body as sent before compression; 413 past ``limit`` decompressed bytes."""
    name = (encoding or "").strip().lower()
    if name in ("", "identity"):
        return body
    wbits = _WBITS.get(name)
    if wbits is None:
        # Triton's words first (its clients match them), then ours
        hint = " (chunked is a Transfer-Encoding)" if name == "chunked" else ""
        raise UnsupportedEncoding(
            f"Unsupported compression type: Content-Encoding {encoding!r} is not supported"
            f"{hint}: send gzip, deflate or identity"
        )
    decompressor = zlib.decompressobj(wbits)
    try:
        data = decompressor.decompress(body, limit + 1)
    except zlib.error as exc:
        raise InvalidInput(f"the body is not valid {name} data: {exc}") from None
    if len(data) > limit:
        raise PayloadTooLarge(
            f"the request body decompresses to over the {limit}-byte limit "
            f"({len(body)} {name} bytes): send fewer rows per request"
        )
    if not decompressor.eof:
        raise InvalidInput(f"the {name} body is truncated: it ends before its compressed data")
    return data
