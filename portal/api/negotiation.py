"""DRF's content negotiation, remembered (a module of its own: DRF's views import it while they are defined)."""

from rest_framework import negotiation


class ContentNegotiation(negotiation.DefaultContentNegotiation):
    """DRF's choice of renderer, remembered per Accept header and list of renderers: DRF parses the header and
    matches it against each renderer on every request (about a thirtieth of a jobs-list request's CPU, bench/api.py),
    and the answer depends on nothing else when no format is asked for (`?format=`, a `.json` suffix). A few hundred
    headers at most are remembered (a client may send any header); a header that is refused (406) is not."""

    remembered_at_most = 256
    _chosen: dict[tuple[str, tuple[type, ...]], tuple[int, str]] = {}

    def select_renderer(self, request, renderers, format_suffix=None):
        accept = request.META.get("HTTP_ACCEPT", "*/*")
        if format_suffix or self.settings.URL_FORMAT_OVERRIDE in request.query_params:
            return super().select_renderer(request, renderers, format_suffix)
        key = (accept, tuple(type(renderer) for renderer in renderers))
        chosen = self._chosen.get(key)
        if chosen is not None:
            return renderers[chosen[0]], chosen[1]
        renderer, media_type = super().select_renderer(request, renderers, format_suffix)
        if len(self._chosen) < self.remembered_at_most:
            self._chosen[key] = (renderers.index(renderer), media_type)
        return renderer, media_type
