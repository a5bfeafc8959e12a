"""Each signed-in user sees the portal in their own language (`User.language`), whatever the browser asks for."""

from django.utils import translation


class UserLanguageMiddleware:
    """Runs after AuthenticationMiddleware: activates the user's language for the request (LocaleMiddleware,
    earlier in the chain, has already chosen one from the cookie or Accept-Language for anonymous visitors)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated and user.language:
            translation.activate(user.language)
            request.LANGUAGE_CODE = translation.get_language()
        return self.get_response(request)
