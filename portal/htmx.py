"""The one place that decides between a full page and an HTMX fragment (STYLE.md, conventions 9)."""

from django.shortcuts import render

# Status 286 tells htmx to stop polling (https://htmx.org/docs/#polling).
STOP_POLLING = 286


def render_page_or_partial(request, page: str, partial: str, context: dict, *, stop_polling: bool = False):
    """Render `partial` for an htmx request and `page` (which includes the partial) otherwise."""
    if getattr(request, "htmx", False) and not request.htmx.boosted:
        response = render(request, partial, context)
        if stop_polling:
            response.status_code = STOP_POLLING
        return response
    return render(request, page, context)
