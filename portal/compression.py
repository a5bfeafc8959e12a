"""Compressed answers, and what is never compressed (BREACH).

Live pages are mostly repeated markup (a dashboard of 1,000 nodes is 8,000 GPU slots), so gzip shrinks them about
tenfold. BREACH recovers a secret from the size of compressed answers that also reflect text an attacker chooses.
What the portal's compressed answers hold: the CSRF token, which Django masks afresh in every answer (a different
string each time, so the size says nothing about it), and Django's GZipMiddleware adds up to 100 random bytes to
every compressed answer. The one secret that is not masked is an API token's plaintext, in the answer to its
creation: an answer that carries such a secret sets `response.never_compress = True` and goes out uncompressed.
Session cookies travel in headers, which HTTP/1.1 never compresses.
"""

from django.middleware.gzip import GZipMiddleware


class CompressionMiddleware(GZipMiddleware):
    """Django's GZipMiddleware, except for answers marked `never_compress`."""

    def process_response(self, request, response):
        if getattr(response, "never_compress", False):
            return response
        return super().process_response(request, response)
